"""Tasks (sgdet, sgcls, predcls), A@k, F1@k, predicate groups and the list warnings: hand
fixtures of every rule, and the plain-Python reference on random data."""

import json

import numpy as np
import pytest

import sgeval
from tests.reference import reference_evaluate
from tests.conftest import confusion_cells
from tests.core.test_reference import assert_close
from tools import synth

KS = ("1", "2", "5", "x1")


def write_box_case(tmp_path, images, predictions, train=(), predicates=("on", "has", "near", "of")):
    """A box-mode GT (images: (boxes, categories, relations) each; train: relations over two
    category-0 instances) and its prediction JSON -> config values."""
    data = [{"image_id": str(i), "height": 100, "width": 100,
             "segments_info": [{"id": j + 1, "category_id": c} for j, c in enumerate(categories)],
             "annotations": [{"bbox": list(map(float, box))} for box in boxes], "relations": relations}
            for i, (boxes, categories, relations) in enumerate(images)]
    data += [{"image_id": f"t{i}", "height": 100, "width": 100,
              "segments_info": [{"id": 1, "category_id": 0}, {"id": 2, "category_id": 0}],
              "annotations": [{"bbox": [0.0, 0.0, 9.0, 9.0]}] * 2, "relations": relations}
             for i, relations in enumerate(train)]
    gt = {"thing_classes": ["a", "b", "c"], "stuff_classes": [], "predicate_classes": list(predicates),
          "test_image_ids": [str(i) for i in range(len(images))], "data": data}
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    (tmp_path / "pred.json").write_text(json.dumps({"version": 1, "images": predictions}))
    return {"gt": str(tmp_path / "gt.json"), "pred": str(tmp_path / "pred.json"), "k": ["1", "2", "50"]}


BOXES = [[0, 0, 10, 10], [20, 20, 30, 30], [40, 40, 50, 50], [60, 60, 70, 70]]


def record(image_id, categories, boxes, triplets, ng_triplets=None):
    out = {"id": image_id, "instances": [{"category": c, "bbox": b} for c, b in zip(categories, boxes)],
           "triplets": triplets}
    if ng_triplets is not None:
        out["ng_triplets"] = ng_triplets
    return out


def one_image_case(tmp_path, pred_categories, pred_boxes, triplets, relations=((0, 1, 0), (2, 3, 1))):
    images = [(BOXES, [0, 1, 2, 0], [list(r) for r in relations])]
    return write_box_case(tmp_path, images, [record("0", pred_categories, pred_boxes, triplets)])


def test_predcls_matches_with_the_gt_instances_whatever_was_stored(tmp_path):
    far = [[b[0] + 50, b[1], b[2] + 50, b[3]] for b in BOXES]  # no stored box overlaps its GT box
    values = one_image_case(tmp_path, [1, 1, 1, 1], far, [[0, 1, 0], [2, 3, 1]])
    assert sgeval.evaluate({**values, "task": "sgdet"})["metrics"]["R@50"] == 0
    result = sgeval.evaluate({**values, "task": "predcls"})
    assert result["metrics"]["R@50"] == 1
    check = result["task_check"]
    assert check["boxes_differ"]["images"] == 1 and check["labels_differ"]["images"] == 1
    assert check["boxes_differ"]["examples"] == ["0"] and check["instance_count_differs"]["images"] == 0
    sgcls = sgeval.evaluate({**values, "task": "sgcls"})  # stored boxes and labels
    assert sgcls["metrics"]["R@50"] == 0 and sgcls["task_check"]["labels_differ"]["images"] == 0


def test_predcls_with_another_instance_count_is_evaluated_as_stored_and_reported(tmp_path):
    """The fair protocols (and openpsg) score it as stored; sgb puts the GT's instances in place by
    index, as its tool does (the first three are the stored ones here: the same hit), and the task
    check says so."""
    values = one_image_case(tmp_path, [0, 1, 2], BOXES[:3], [[0, 1, 0]])
    result = sgeval.evaluate({**values, "task": "predcls", "protocols": list(sgeval.RECALL_PROTOCOLS)})
    differs = result["task_check"]["instance_count_differs"]
    assert {key: differs[key] for key in ("images", "meaning", "examples")} == {
        "images": 1, "meaning": "instance count differs from the GT's", "examples": ["0"]}
    assert [note.split(":")[0] for note in differs["protocols"]] == ["sgb"]
    assert {section["metrics"]["R@50"] for section in result["by_protocol"].values()} == {0.5}


def test_boxes_within_one_pixel_are_the_gt_boxes(tmp_path):
    near = [[b[0] + 1, b[1] - 1, b[2] + 1, b[3]] for b in BOXES]
    values = one_image_case(tmp_path, [0, 1, 2, 0], near, [[0, 1, 0]])
    assert sgeval.evaluate({**values, "task": "sgcls"})["task_check"]["boxes_differ"]["images"] == 0
    near[2][3] += 1.01
    values = one_image_case(tmp_path, [0, 1, 2, 0], near, [[0, 1, 0]])
    assert sgeval.evaluate({**values, "task": "sgcls"})["task_check"]["boxes_differ"]["images"] == 1


def test_a_at_k_takes_the_first_k_rows_on_gt_pairs(tmp_path):
    # rows: two off GT pairs first, then (0, 1) with the wrong and the right predicate, then (2, 3, 1)
    rows = [[0, 2, 0], [1, 3, 1], [0, 1, 2], [0, 1, 0], [2, 3, 1]]
    values = one_image_case(tmp_path, [0, 1, 2, 0], BOXES, rows)
    for protocol in sgeval.RECALL_PROTOCOLS:
        metrics = sgeval.evaluate({**values, "task": "predcls", "protocol": protocol})["metrics"]
        assert (metrics["R@1"], metrics["R@2"]) == (0, 0), protocol
        graph_constraint = protocol in ("unique", "singlempo")  # (0, 1, 0) repeats the pair of (0, 1, 2)
        assert (metrics["A@1"], metrics["A@2"]) == ((0, 0.5) if graph_constraint else (0, 0.5)), protocol
        assert metrics["A@50"] == (0.5 if graph_constraint else 1), protocol
    assert "A@1" not in sgeval.evaluate({**values, "task": "sgdet"})["metrics"]


def test_a_at_k_is_pooled_over_images(tmp_path):
    images = [(BOXES, [0, 1, 2, 0], [[0, 1, 0]]), (BOXES, [0, 1, 2, 0], [[0, 1, 0], [2, 3, 1], [1, 2, 2]])]
    predictions = [record("0", [0, 1, 2, 0], BOXES, [[0, 1, 0]]), record("1", [0, 1, 2, 0], BOXES, [[0, 1, 0]])]
    values = write_box_case(tmp_path, images, predictions)
    for protocol in ("unique", "sgb"):
        metrics = sgeval.evaluate({**values, "task": "sgcls", "protocol": protocol})["metrics"]
        assert metrics["A@50"] == pytest.approx(2 / 4)  # per image it would be (1 + 1/3) / 2
        assert metrics["R@50"] == pytest.approx((1 + 1 / 3) / 2)


def test_sgb_a_at_k_counts_duplicate_gt_rows_and_skips_left_out_images(tmp_path):
    images = [(BOXES, [0, 1, 2, 0], [[0, 1, 0], [0, 1, 0], [2, 3, 1]]), (BOXES, [0, 1, 2, 0], [[0, 1, 0]])]
    predictions = [record("0", [0, 1, 2, 0], BOXES, [[0, 1, 0]]), record("1", [0, 1, 2, 0], BOXES, [])]
    values = write_box_case(tmp_path, images, predictions)
    result = sgeval.evaluate({**values, "task": "predcls", "protocol": "sgb"})
    assert result["metrics"]["A@1"] == pytest.approx(2 / 3) and result["images_left_out"] == 1


def test_f1_is_the_harmonic_mean_of_r_and_mr(tmp_path):
    images = [(BOXES, [0, 1, 2, 0], [[0, 1, 0], [2, 3, 1], [1, 2, 1], [0, 3, 1]])]
    values = write_box_case(tmp_path, images, [record("0", [0, 1, 2, 0], BOXES, [[0, 1, 0]])])
    metrics = sgeval.evaluate({**values, "metrics": ["F1", "R"]})["metrics"]
    recall, mean_recall = 1 / 4, (1 + 0) / 2
    assert metrics["F1@50"] == pytest.approx(2 * recall * mean_recall / (recall + mean_recall))
    assert "mR@50" not in metrics and metrics["R@50"] == recall
    values = write_box_case(tmp_path, images, [record("0", [0, 1, 2, 0], BOXES, [])])
    assert sgeval.evaluate({**values, "metrics": ["F1"]})["metrics"]["F1@50"] == 0


def test_frequency_groups_follow_the_training_shares(tmp_path):
    counts = np.array([10, 50, 30, 10])  # on 10, has 50, near 30, of 10: head has (50%), body near (80%)
    assert sgeval.predicate_groups("frequency", ["on", "has", "near", "of"], counts) == {
        "head": (1,), "body": (2, 0), "tail": (3,)}
    counts = np.array([0, 40, 40, 20])
    assert sgeval.predicate_groups("frequency", ["on", "has", "near", "of"], counts) == {
        "head": (1, 2), "body": (3,), "tail": (0,)}
    with pytest.raises(sgeval.SGEvalError, match="needs training relations"):
        sgeval.predicate_groups("frequency", ["on"], np.zeros(1, np.int64))


def test_group_means_follow_the_absent_rule(tmp_path):
    images = [(BOXES, [0, 1, 2, 0], [[0, 1, 0], [2, 3, 1], [1, 2, 2]])]
    train = [[[0, 1, 1]]] * 5 + [[[0, 1, 2]]] * 3 + [[[0, 1, 0]]] + [[[0, 1, 3]]]
    values = write_box_case(tmp_path, images, [record("0", [0, 1, 2, 0], BOXES, [[0, 1, 0], [2, 3, 1]])],
                            train=train)
    result = sgeval.evaluate({**values, "predicate_groups": "frequency", "protocols": ["sgb"]})
    assert result["predicate_groups"] == {"head": ["has"], "body": ["near", "on"], "tail": ["of"]}
    metrics = result["metrics"]
    assert (metrics["mR@50/head"], metrics["mR@50/body"], metrics["mR@50/tail"]) == (1, 0.5, None)
    sgb = result["by_protocol"]["sgb"]["metrics"]  # absent predicates count 0
    assert (sgb["mR@50/head"], sgb["mR@50/body"], sgb["mR@50/tail"]) == (1, 0.5, 0)
    table = sgeval.format_table(result)
    assert "head" in table and "tail" in table


def test_group_files_and_presets(tmp_path):
    names = ["on", "has", "near", "of"]
    path = tmp_path / "groups.yaml"
    path.write_text("frequent: [on, has]\nrare: [of]\n")
    assert sgeval.predicate_groups(str(path), names, None) == {"frequent": (0, 1), "rare": (3,)}
    path.write_text("a: [on, under]\nb: [on]\n")
    with pytest.raises(sgeval.SGEvalError) as error:
        sgeval.predicate_groups(str(path), names, None)
    assert "'under' is not a predicate of the GT" in str(error.value) and "'on' is in more than one" in str(error.value)
    with pytest.raises(sgeval.SGEvalError, match="not a predicate of the GT"):
        sgeval.predicate_groups("pysgg-vg150", names, None)
    vg = [f"p{i}" for i in range(34)] + list(sgeval.PREDICATE_GROUP_PRESETS["pysgg-vg150"]["head"]) \
        + list(sgeval.PREDICATE_GROUP_PRESETS["pysgg-vg150"]["body"])
    groups = sgeval.predicate_groups("pysgg-vg150", vg, None)
    assert [len(groups[g]) for g in ("head", "body", "tail")] == [4, 12, 34]
    with pytest.raises(sgeval.SGEvalError, match="cannot read the file"):
        sgeval.predicate_groups(str(tmp_path / "missing.yaml"), names, None)


def test_warning_for_predictions_restricted_to_gt_pairs(tmp_path):
    values = one_image_case(tmp_path, [0, 1, 2, 0], BOXES, [[0, 1, 0], [2, 3, 2]])
    warnings = sgeval.evaluate({**values, "task": "predcls"})["warnings"]
    assert any("restricted to GT pairs" in w and "R@50" in w for w in warnings)
    assert not any("restricted" in w for w in sgeval.evaluate({**values, "task": "sgdet"})["warnings"])
    values = one_image_case(tmp_path, [0, 1, 2, 0], BOXES, [[0, 1, 0], [0, 2, 2]])
    assert not any("restricted" in w for w in sgeval.evaluate({**values, "task": "predcls"})["warnings"])


def test_warning_for_a_no_graph_constraint_list_given_as_triplets(tmp_path):
    rows = [[0, 1, 0], [0, 1, 1], [0, 1, 2], [2, 3, 1]]
    values = one_image_case(tmp_path, [0, 1, 2, 0], BOXES, rows)
    warnings = sgeval.evaluate(values)["warnings"]
    assert any("2 of 4 rows of 'triplets' repeat" in w for w in warnings)
    values = one_image_case(tmp_path, [0, 1, 2, 0], BOXES, rows[1:])
    assert not any("repeat a subject-object pair" in w for w in sgeval.evaluate(values)["warnings"])


def test_task_and_groups_from_the_command_line(tmp_path):
    from click.testing import CliRunner
    values = one_image_case(tmp_path, [0, 1, 2, 0], BOXES, [[0, 1, 0]])
    result = CliRunner().invoke(sgeval.main, ["--quiet", "--gt", values["gt"], "--pred", values["pred"], "--task",
                                              "predcls", "--k", "1,50", "--metrics", "R,mR,F1,A"])
    assert result.exit_code == 0, result.output
    assert "A@k" in result.output and "F1" in result.output and "Top@K accuracy" in result.output
    bad = CliRunner().invoke(sgeval.main, ["--gt", values["gt"], "--pred", values["pred"], "--task", "preddet"])
    assert bad.exit_code != 0


def task_case(tmp_path, seed, with_masks):
    """A synthetic GT and predictions holding its instances (a few images with one missing, some
    boxes moved, some labels changed), rows on GT pairs and off them."""
    rng = np.random.default_rng(seed)
    dataset = synth.make_dataset(rng, n_images=24, height=int(rng.integers(10, 24)), width=int(rng.integers(10, 24)),
                                 n_things=3, n_stuff=2, n_predicates=5)
    predictions = []
    for image in (im for im in dataset["images"] if im["split"] == "test"):
        if rng.random() < 0.1:
            continue
        n = len(image["categories"]) - (rng.random() < 0.15)
        categories = [int(c) if rng.random() > 0.1 else int(rng.integers(5)) for c in image["categories"][:n]]
        boxes = [[float(v) + sign * (2.0 if rng.random() < 0.05 else 0.5 * float(rng.integers(0, 2)))
                  for v, sign in zip(box, (-1, -1, 1, 1))] for box in image["boxes"][:n]]
        gt_pairs = [(s, o) for s, o, _ in image["relations"] if max(s, o) < n]
        rows = [[*gt_pairs[int(rng.integers(len(gt_pairs)))], int(rng.integers(5))]
                if gt_pairs and rng.random() < 0.6 else [int(rng.integers(n)), int(rng.integers(n)), int(rng.integers(5))]
                for _ in range(int(rng.integers(0, 12))) if n]
        out = {"id": image["image_id"], "triplets": rows, "ng_triplets": rows[::-1] + rows,
               "instances": [{"category": c, "bbox": b} for c, b in zip(categories, boxes)]}
        if with_masks:
            out["masks"] = np.asarray(image["masks"], bool)[:n]
        predictions.append(out)
    gt = synth.write_gt(dataset, tmp_path / "gt")
    pred = sgeval.write_predictions(tmp_path / ("pred.zip" if with_masks else "pred.json"), predictions)
    values = {"gt": str(gt), "pred": str(pred), "k": list(KS), "metrics": list(sgeval.METRIC_FAMILIES)}
    if with_masks:
        values["gt_seg"] = str(tmp_path / "gt" / "panoptic")
    return dataset, predictions, values


@pytest.mark.parametrize("with_masks", [True, False], ids=["mask", "box"])
@pytest.mark.parametrize("task", ["sgcls", "predcls"])
@pytest.mark.parametrize("seed", range(3))
def test_tasks_match_the_reference(tmp_path, seed, task, with_masks):
    dataset, predictions, values = task_case(tmp_path, seed, with_masks)
    mode = "mask" if with_masks else "box"
    groups = {"head": [0, 1], "tail": [2, 3, 4]}
    groups_file = tmp_path / "groups.json"
    groups_file.write_text(json.dumps({name: [dataset["predicate_classes"][p] for p in members]
                                       for name, members in groups.items()}))
    for absent, aggregation in (("skip", "per_image"), ("zero", "pooled")):
        fast = sgeval.evaluate({**values, "protocols": list(sgeval.RECALL_PROTOCOLS), "task": task, "absent_predicates": absent,
                                "aggregation": aggregation, "predicate_groups": str(groups_file)})
        for protocol in sgeval.RECALL_PROTOCOLS:
            where = f"seed {seed} {mode} {task} {protocol} absent={absent} {aggregation}"
            slow = reference_evaluate(dataset, predictions, mode=mode, ks=KS, protocol=protocol, task=task,
                                      absent_predicates=absent, aggregation=aggregation, groups=groups, f1=True)
            assert_close(fast["by_protocol"][protocol]["metrics"], slow["metrics"], where)
            assert confusion_cells(fast["by_protocol"][protocol]["predicate_confusion"]) == slow["confusion"], where
    assert fast["task_check"]["instance_count_differs"]["images"] > 0
    if task == "predcls":
        assert fast["task_check"]["labels_differ"]["images"] > 0
    assert (fast["task_check"]["boxes_differ"]["images"] > 0) == (not with_masks)  # mask mode: bbox not read
    assert any(value not in (None, 0) for key, value in fast["metrics"].items() if key.startswith("A@"))


def test_a_task_other_than_the_converted_one_is_a_warning(tmp_path):
    values = one_image_case(tmp_path, [0, 1, 2, 0], BOXES, [[0, 1, 0]])
    predictions = json.loads((tmp_path / "pred.json").read_text())["images"]
    for image in predictions:
        image["instances"] = [{"category": i["category"], "bbox": i["bbox"]} for i in image["instances"]]
    pred = sgeval.write_predictions(tmp_path / "pred.zip", predictions,
                                    extra_members={"convert.json": json.dumps({"task": "predcls"}).encode()})
    values["pred"] = str(pred)
    assert any("converted as predcls" in w for w in sgeval.evaluate(values)["warnings"])
    assert not any("converted as" in w for w in sgeval.evaluate({**values, "task": "predcls"})["warnings"])


def test_a_at_k_reads_index_pairs_when_the_prediction_has_more_instances_than_the_gt(tmp_path):
    # (1, 4) must not be taken for the GT pair (2, 0): with 4 GT instances both would key 1 * 4 + 4 = 2 * 4 + 0
    values = one_image_case(tmp_path, [0, 1, 2, 0, 1], BOXES + [[80, 80, 90, 90]], [[1, 4, 0], [2, 0, 0]],
                            relations=[(2, 0, 0)])
    result = sgeval.evaluate({**values, "task": "sgcls"})
    assert result["task_check"]["instance_count_differs"]["images"] == 1
    assert result["metrics"]["A@1"] == 1 and result["metrics"]["R@1"] == 0
