"""sgeval_convert/sgb.py (Scene-Graph-Benchmark's eval_results.pytorch -> sgeval predictions, box mode) and
sgeval_convert/zeroshot.py: a generated box-mode GT JSON and eval_results files written by
tools/torchsave.py in both torch.save formats; one small hand case per rule; the converted ZIP read
by sgeval and evaluated under the sgb protocol."""

import json
import zipfile

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from conftest import LiveTensor, assert_arrays_written, assert_same_results, evaluate_updates, sgeval

from sgeval_convert import recipe as convert_recipe
from sgeval_convert import common, sgb, zeroshot
from tools import torchsave

OBJECTS, PREDICATES = ["person", "horse", "dog", "hat"], ["on", "has", "near"]
# evaluated images, in order: (image_id, width, height, categories, boxes, relation rows (repeats kept))
IMAGES = [("11", 32, 24, [2, 0, 1], [[0, 0, 10, 10], [5, 5, 20, 15], [1, 2, 3, 4]], [[0, 1, 1], [2, 1, 0], [0, 1, 1]]),
          ("12", 16, 16, [0, 0], [[2, 2, 8, 8], [0, 0, 4, 4]], [[1, 0, 2]])]


def write_gt(path):
    """A box-mode GT JSON (psg.json shape): the two evaluated IMAGES, a test image without
    relations (not evaluated) and a training image between them."""
    def entry(image_id, width, height, categories, boxes, relations):
        return {"image_id": image_id, "width": width, "height": height, "relations": relations,
                "segments_info": [{"id": n + 1, "category_id": c} for n, c in enumerate(categories)],
                "annotations": [{"bbox": box} for box in boxes]}
    data = [entry(*IMAGES[0]), entry("13", 8, 8, [0], [[0, 0, 2, 2]], []), entry("5", 8, 8, [1, 2], [[0, 0, 2, 2]] * 2,
                                                                             [[0, 1, 2]]), entry(*IMAGES[1])]
    path.write_text(json.dumps({"thing_classes": OBJECTS, "stuff_classes": [], "predicate_classes": PREDICATES,
                                "test_image_ids": ["11", "12", "13"], "data": data}))
    return path


def groundtruths():
    return [torchsave.BoxList(boxes, (width, height), extra_fields={
        "labels": np.array(categories) + 1, "relation_tuple": np.array(rows) + [0, 0, 1],
        "relation": np.zeros((len(categories),) * 2, np.int64)}, triplet_extra_fields=["relation"])
        for _, width, height, categories, boxes, rows in IMAGES]


def f32(rows):
    return np.array(rows, np.float32)


def prediction(boxes, size, classes, scores, pairs, rel_scores, mode="xyxy", **extra):
    fields = {"pred_labels": np.array(classes, np.int64), "pred_scores": f32(scores),
              "rel_pair_idxs": np.array(pairs, np.int64).reshape(-1, 2), "pred_rel_scores": f32(rel_scores).reshape(-1, 4),
              **extra}
    return torchsave.BoxList(boxes, size, mode, fields)


def predictions():
    """sgcls-like predictions of IMAGES (predict_logits present)."""
    return [prediction(IMAGES[0][4], (32, 24), [3, 1, 2], [0.5, 0.25, 0.75], [[0, 1], [2, 1], [1, 0], [0, 0]],
                       [[0.1, 0.2, 0.6, 0.1], [0.4, 0.5, 0.05, 0.05], [0.1, 0.3, 0.3, 0.3], [0.9, 0.1, 0.0, 0.0]],
                       pred_rel_labels=np.array([2, 1, 3, 1]), labels=np.array([3, 1, 2]),
                       predict_logits=np.zeros((3, 5), np.float32)),
            prediction(IMAGES[1][4], (16, 16), [1, 1], [1.0, 0.5], [[1, 0]], [[0.0, 0.2, 0.2, 0.6]],
                       labels=np.array([1, 1]), predict_logits=np.zeros((2, 5), np.float32))]


def resized_predictions():
    """predictions() stored at another size: image 11 (32 x 24) at (64, 48), a ratio of 0.5 both
    ways; image 12 (16 x 16) at (20, 16) in xywh, ratios 0.8 and 1."""
    preds = predictions()
    preds[0].state.update(bbox=f32([[0, 0, 20, 20], [10, 10, 40, 30], [2, 4, 6, 8]]), size=(64, 48))
    preds[1].state.update(bbox=f32([[2.5, 2, 7, 7], [0, 0, 5, 5]]), size=(20, 16), mode="xywh")
    return preds


@pytest.fixture
def gt(tmp_path):
    return write_gt(tmp_path / "vg.json")


def write_results(path, preds=None, gts="default", legacy=False):
    value = {"predictions": predictions() if preds is None else preds}
    if gts is not None:
        value["groundtruths"] = groundtruths() if gts == "default" else gts
    return torchsave.save(path, value, legacy=legacy)


def read(out):
    """{image id: PredImage} of a converted ZIP, as sgeval reads it."""
    return sgeval.read_predictions(str(out), len(OBJECTS), len(PREDICATES), "box")[1]


def provenance(out):
    with zipfile.ZipFile(out) as archive:
        return json.loads(archive.read(common.PROVENANCE))


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_both_formats_convert_to_what_sgeval_reads_and_evaluates(tmp_path, gt, legacy):
    raw = write_results(tmp_path / "eval_results.pytorch", legacy=legacy)
    summary = sgb.convert(raw, tmp_path / "out.zip", gt)
    assert summary["images"] == 2 and summary["task:sgcls"] == 2 and summary["guessed"] == 1
    records = read(tmp_path / "out.zip")
    first = records["11"]
    assert first.categories.tolist() == [2, 0, 1] and first.boxes.tolist() == IMAGES[0][4]
    assert first.scores.tolist() == [0.5, 0.25, 0.75]
    # triplets: the rows as stored, argmax of columns 1.. (ties: the first), the [0, 0] self-pair kept
    assert first.triplets.tolist() == [[0, 1, 1], [2, 1, 0], [1, 0, 0], [0, 0, 0]]
    assert provenance(tmp_path / "out.zip")["task"] == "sgcls"
    assert provenance(tmp_path / "out.zip")["options"] == {"task": "auto", "ng_top": 1000, "ng_per_predicate": 50}
    if not legacy:  # every GT row is hit (image 11's repeated row too; image 12 by its row [1, 0, near])
        results = sgeval.evaluate(sgeval.load_config(gt=str(gt), pred=str(tmp_path / "out.zip"), protocol="sgb",
                                                     workers=1))
        assert results["metrics"]["R@20"] == 1.0 and results["metrics"]["ngR@20"] == 1.0


def test_pred_rel_labels_are_ignored_and_counted(tmp_path, gt):
    summary = sgb.convert(write_results(tmp_path / "r.pytorch"), tmp_path / "out.zip", gt)
    # stored labels [2, 1, 3, 1] against argmax + 1 = [2, 1, 2, 1]
    assert summary["pred_rel_rows"] == 4 and summary["pred_rel_labels_differ"] == 1
    assert "rel_labels differ from argmax" in common.describe(summary)


def test_ng_ranking_uses_object_scores_except_in_predcls(tmp_path, gt):
    raw = write_results(tmp_path / "r.pytorch")
    sgb.convert(raw, tmp_path / "sgcls.zip", gt, task="sgcls")
    sgb.convert(raw, tmp_path / "predcls.zip", gt, task="predcls")
    # sgcls: scores = obj_s x obj_o x p in float32; object scores 0.5, 0.25, 0.75
    scores = f32([0.5, 0.25, 0.75])
    probabilities = f32([[0.2, 0.6, 0.1], [0.5, 0.05, 0.05], [0.3, 0.3, 0.3], [0.1, 0.0, 0.0]])
    pairs = np.array([[0, 1], [2, 1], [1, 0], [0, 0]])
    ranked = scores[pairs].prod(axis=1)[:, None] * probabilities
    order = np.argsort(-ranked.ravel(), kind="stable")
    expected = [[*pairs[i // 3].tolist(), int(i % 3)] for i in order]
    assert read(tmp_path / "sgcls.zip")["11"].ng_triplets.tolist() == expected
    # 0.09375, 0.075, 0.0375 x 3, then 0.125 x 0.2 and 0.25 x 0.1, equal in float32: row order
    assert expected == [[2, 1, 0], [0, 1, 1], [1, 0, 0], [1, 0, 1], [1, 0, 2], [0, 1, 0], [0, 0, 0], [0, 1, 2],
                        [2, 1, 1], [2, 1, 2], [0, 0, 1], [0, 0, 2]]
    # predcls: the probabilities alone; equal ones keep row, then predicate order
    predcls = read(tmp_path / "predcls.zip")["11"].ng_triplets.tolist()
    assert predcls == [[0, 1, 1], [2, 1, 0], [1, 0, 0], [1, 0, 1], [1, 0, 2], [0, 1, 0], [0, 1, 2], [0, 0, 0],
                       [2, 1, 1], [2, 1, 2], [0, 0, 1], [0, 0, 2]]
    assert provenance(tmp_path / "predcls.zip")["task"] == "predcls"


def test_task_auto_guesses_from_the_fields(tmp_path, gt):
    def without(*names):
        preds = predictions()
        for pred in preds:
            for name in names:
                del pred.state["extra_fields"][name]
        return preds
    for preds, task in ((without("predict_logits"), "predcls"), (without("labels", "predict_logits"), "sgdet"),
                        (predictions(), "sgcls")):
        raw = write_results(tmp_path / f"{task}.pytorch", preds)
        summary = sgb.convert(raw, tmp_path / f"{task}.zip", gt)
        assert summary[f"task:{task}"] == 2 and provenance(tmp_path / f"{task}.zip")["task"] == task
        assert f"task: {task} 2 images (guessed from the fields" in common.describe(summary)
    summary = sgb.convert(tmp_path / "sgdet.pytorch", tmp_path / "forced.zip", gt, task="sgcls")
    assert summary["task_fields_differ"] == 2 and summary["guessed"] == 0


def test_a_box_count_other_than_the_gt_is_counted_in_predcls_and_sgcls(tmp_path, gt):
    preds = predictions()
    preds[1] = prediction([[2, 2, 8, 8]], (16, 16), [1], [1.0], [[0, 0]], [[0.0, 0.2, 0.2, 0.6]],
                          labels=np.array([1]), predict_logits=np.zeros((1, 5), np.float32))
    raw = write_results(tmp_path / "r.pytorch", preds, gts=None)
    assert sgb.convert(raw, tmp_path / "a.zip", gt)["box_count_differs"] == 1
    assert sgb.convert(raw, tmp_path / "b.zip", gt, task="sgdet")["box_count_differs"] == 0


def test_boxes_are_resized_as_boxlist_resize_does(tmp_path, gt):
    summary = sgb.convert(write_results(tmp_path / "r.pytorch", resized_predictions(), gts=None), tmp_path / "out.zip",
                          gt)
    records = read(tmp_path / "out.zip")
    assert records["11"].boxes.tolist() == [[0, 0, 10, 10], [5, 5, 20, 15], [1, 2, 3, 4]]
    ratio = np.float32(16 / 20)  # x only; xywh -> xyxy (x2 = x1 + w - 1) -> scaled -> xywh -> xyxy
    x1, x2 = f32([2.5, 0]) * ratio, f32([8.5, 4]) * ratio
    w = x2 - x1 + np.float32(1)
    expected = np.column_stack([x1, [2, 0], x1 + (w - np.float32(1)), [8, 4]]).astype(np.float32)
    assert records["12"].boxes.tolist() == expected.tolist()
    assert summary["resized"] == 2


@pytest.mark.parametrize("edit,words", [
    (lambda g: g[0].state["extra_fields"].update(labels=np.array([3, 2, 2])), "image 11): groundtruth field 'labels'"),
    (lambda g: g[0].state["extra_fields"].update(relation_tuple=np.array([[2, 1, 1], [0, 1, 2], [0, 1, 2]])),
     "image 11): groundtruth field 'relation_tuple'"),
    (lambda g: g[0].state["extra_fields"].update(relation_tuple=np.array([[0, 1, 2], [2, 1, 1]])),
     "field 'relation_tuple'"),  # a repeated row dropped
    (lambda g: g[1].state.update(bbox=f32([[2, 2, 8, 8], [0, 0, 4, 5.5]])), "image 12): groundtruth field 'bbox'"),
])
def test_groundtruths_that_differ_from_the_gt_json_are_errors(tmp_path, gt, edit, words):
    gts = groundtruths()
    edit(gts)
    with pytest.raises(common.ConvertError) as error:
        sgb.convert(write_results(tmp_path / "r.pytorch", gts=gts), tmp_path / "out.zip", gt)
    assert any(words in problem and "another GT" in problem for problem in error.value.problems), error.value.problems
    assert not (tmp_path / "out.zip").exists()


def test_boxes_within_one_pixel_of_the_gt_json_are_accepted(tmp_path, gt):
    gts = groundtruths()
    gts[1].state["bbox"] = f32([[2, 2, 8, 8], [0, 0.5, 4, 4.75]])
    sgb.convert(write_results(tmp_path / "r.pytorch", gts=gts), tmp_path / "out.zip", gt)


def test_a_count_mismatch_says_what_the_counts_mean(tmp_path, gt):
    raw = write_results(tmp_path / "r.pytorch", predictions()[:1], gts=None)
    with pytest.raises(common.ConvertError, match="holds 1 results, but .* has 2 evaluated images .*matched by position"):
        sgb.convert(raw, tmp_path / "out.zip", gt)
    raw = write_results(tmp_path / "r.pytorch", predictions(), gts=groundtruths()[:1])
    with pytest.raises(common.ConvertError, match="2 predictions but 1 groundtruths"):
        sgb.convert(raw, tmp_path / "out.zip", gt)


def test_an_image_without_rows_is_written_without_triplets(tmp_path, gt):
    preds = predictions()
    preds[1] = prediction(IMAGES[1][4], (16, 16), [1, 1], [1.0, 0.5], np.zeros((0, 2)), np.zeros((0, 4)),
                          labels=np.array([1, 1]), predict_logits=np.zeros((2, 5), np.float32))
    sgb.convert(write_results(tmp_path / "r.pytorch", preds), tmp_path / "out.zip", gt)
    record = read(tmp_path / "out.zip")["12"]
    assert len(record.categories) == 2 and record.triplets.shape == (0, 3) and record.ng_triplets.shape == (0, 3)


@pytest.mark.parametrize("value,words", [
    ([1, 2], "holds a list; expected {'groundtruths'"),
    ({"predictions": [np.zeros(3)]}, "'predictions' must be a list of BoxList"),
    ({"predictions": "x"}, "'predictions' must be a list of BoxList"),
])
def test_files_of_another_shape(tmp_path, gt, value, words):
    with pytest.raises(common.ConvertError, match=words):
        sgb.convert(torchsave.save(tmp_path / "r.pytorch", value), tmp_path / "out.zip", gt)


@pytest.mark.parametrize("field,value,words", [
    ("rel_pair_idxs", np.array([[0, 3]]), "image 11\\): field 'prediction.rel_pair_idxs' holds 3 at position 1; only 3 boxes"),
    ("pred_labels", np.array([0, 1, 2]), "pred_labels are 1-based object classes 1..4"),
    ("pred_rel_scores", np.zeros((4, 3), np.float32), "field 'pred_rel_scores' has shape \\(4, 3\\); expected \\(4, 4\\)"),
    ("pred_scores", f32([np.nan, 0, 0]), "field 'pred_scores' holds NaN"),
    ("pred_scores", None, "has no field 'pred_scores'"),
    ("pred_labels", np.array(["a", "b", "c"]), None),
])
def test_bad_prediction_fields_name_the_image_and_field(tmp_path, gt, field, value, words):
    preds = predictions()
    if value is None:
        del preds[0].state["extra_fields"][field]
    elif value.dtype.kind == "U":
        preds[0].state["extra_fields"][field] = torchsave.Global("numpy.str_")
        words = "refusing to load"
    else:
        preds[0].state["extra_fields"][field] = value
    with pytest.raises(common.ConvertError) as error:
        sgb.convert(write_results(tmp_path / "r.pytorch", preds), tmp_path / "out.zip", gt)
    (problem,) = error.value.problems
    assert problem.startswith(str(tmp_path / "r.pytorch")), problem
    assert __import__("re").search(words, problem), problem


def test_cli_and_recipe(tmp_path, gt):
    raw = write_results(tmp_path / "eval_results.pytorch")
    outcome = CliRunner().invoke(sgb.main, ["--gt", str(gt), "--task", "predcls", "--quiet", str(raw),
                                            str(tmp_path / "cli.zip")])
    assert outcome.exit_code == 0, outcome.output
    assert "task: predcls 2 images" in outcome.output and "(guessed" not in outcome.output
    outcome = CliRunner().invoke(sgb.main, ["--help"])
    assert "--task" in outcome.output and "--predicate-source" not in outcome.output
    (tmp_path / "vg.yaml").write_text(yaml.safe_dump({"gt": str(gt), "pred": str(tmp_path / "recipe.zip"),
                                                      "protocol": "sgb"}))
    (tmp_path / "convert").mkdir()
    (tmp_path / "convert" / "vg.yaml").write_text(yaml.safe_dump({"family": "sgb", "raw": str(raw), "task": "predcls"}))
    message, summary = convert_recipe.prepare(tmp_path / "vg.yaml")
    assert message.startswith("converting") and summary["task:predcls"] == 2
    message, summary = convert_recipe.prepare(tmp_path / "vg.yaml")
    assert "is up to date" in message and summary is None


# ---------------------------------------------------------------------------------------------
# A test loop (inference()): image_arrays of each BoxList, the same rows as the file converter writes
# ---------------------------------------------------------------------------------------------


class LiveBoxList:
    """The BoxList a model hands inference(): Scene-Graph-Benchmark's attributes, tensors as fields."""

    def __init__(self, boxlist):
        state = boxlist.state
        self.bbox, self.size, self.mode = LiveTensor(state["bbox"]), state["size"], state["mode"]
        self.extra_fields = {name: LiveTensor(value) for name, value in state["extra_fields"].items()}
        self.triplet_extra_fields = list(state["triplet_extra_fields"])


def live_updates(gt, preds, task, groundtruths=None):
    """[(image id, image_arrays of the live BoxList)] of the evaluated images, in order."""
    truth = sgeval.read_gt(str(gt))
    sizes = len(truth.object_classes), len(truth.predicate_classes)
    return [(image.image_id, sgb.image_arrays(LiveBoxList(pred), image, *sizes, task=task,
                                              groundtruth=None if groundtruths is None else groundtruths[index]))
            for index, (pred, image) in enumerate(zip(preds, truth.images))]


@pytest.mark.parametrize("task", ["predcls", "sgcls", "sgdet"])
@pytest.mark.parametrize("build", [predictions, resized_predictions])
def test_image_arrays_are_the_rows_the_file_converter_writes(tmp_path, gt, task, build):
    sgb.convert(write_results(tmp_path / "r.pytorch", build(), gts=None), tmp_path / "out.zip", gt, task=task)
    updates = live_updates(gt, build(), task)
    truth = sgeval.read_gt(str(gt))
    source, written = sgeval.read_predictions(str(tmp_path / "out.zip"), len(OBJECTS), len(PREDICATES), "box")
    for (image_id, arrays), image in zip(updates, truth.images):
        assert set(arrays) == {"labels", "triplets", "ng_triplets", "masks", "boxes", "scores"}
        assert_arrays_written(arrays, written[image_id], source, image)
    source.close()
    assert updates[0][1]["triplets"].tolist() == [[0, 1, 1], [2, 1, 0], [1, 0, 0], [0, 0, 0]]


def test_image_arrays_checks_a_groundtruth_and_names_the_image(gt):
    truth = sgeval.read_gt(str(gt))
    updates = live_updates(gt, predictions(), "sgcls", [LiveBoxList(g) for g in groundtruths()])
    assert [image_id for image_id, _ in updates] == ["11", "12"]
    wrong = groundtruths()
    wrong[0].state["extra_fields"].update(labels=np.array([3, 2, 2]))
    with pytest.raises(common.ConvertError, match="^image 11: groundtruth field 'labels'"):
        sgb.image_arrays(LiveBoxList(predictions()[0]), truth.images[0], len(OBJECTS), len(PREDICATES),
                         task="sgcls", groundtruth=LiveBoxList(wrong[0]))
    with pytest.raises(common.ConvertError, match="^image 12: prediction is a list, not a BoxList"):
        sgb.image_arrays([], truth.images[1], len(OBJECTS), len(PREDICATES), task="sgdet")
    with pytest.raises(common.ConvertError, match="task 'x' is not one of"):
        sgb.image_arrays(LiveBoxList(predictions()[1]), truth.images[1], len(OBJECTS), len(PREDICATES), task="x")
    auto = sgb.image_arrays(LiveBoxList(predictions()[0]), truth.images[0], len(OBJECTS), len(PREDICATES))
    assert all(np.array_equal(auto[key], updates[0][1][key]) for key in ("labels", "triplets", "ng_triplets", "boxes"))


@pytest.mark.parametrize("task", ["predcls", "sgcls", "sgdet"])
def test_an_evaluator_updated_in_inference_gives_the_converted_file_s_results(tmp_path, gt, task):
    sgb.convert(write_results(tmp_path / "r.pytorch", resized_predictions()), tmp_path / "out.zip", gt, task=task)
    config = {"gt": str(gt), "task": task, "protocol": "sgb", "protocols": ["unique", "singlempo", "multimpo"],
              "k": ["1", "2", "20"], "absent_predicates": "zero"}
    from_file = sgeval.evaluate(sgeval.make_config({**config, "pred": str(tmp_path / "out.zip")}))
    assert_same_results(evaluate_updates(config, live_updates(gt, resized_predictions(), task)), from_file)


# ---------------------------------------------------------------------------------------------
# zeroshot_triplet.pytorch
# ---------------------------------------------------------------------------------------------


def test_zeroshot_files_of_both_projects(tmp_path, gt):
    from conftest import ROOT
    rows = [[1, 1, 1], [4, 2, 3], [2, 4, 2]]
    sha_gcl = {"x": np.array(rows, np.int32)}["x"]  # SHA-GCL: a zip-format pickle of an int32 numpy array
    import pickle
    with zipfile.ZipFile(tmp_path / "sha.pytorch", "w") as archive:
        archive.writestr("zeroshot_triplet_new/data.pkl", pickle.dumps(sha_gcl, protocol=2))
    for source in (torchsave.save(tmp_path / "sgb.pytorch", np.array(rows), legacy=True), tmp_path / "sha.pytorch"):
        written = zeroshot.convert(source, tmp_path / "zs.json", gt=gt)
        assert json.loads((tmp_path / "zs.json").read_text()) == [[0, 0, 0], [3, 1, 2], [1, 3, 1]] and written == 3
        assert sgeval.read_zeroshot(tmp_path / "zs.json", len(OBJECTS), len(PREDICATES)) == {(0, 0, 0), (3, 1, 2),
                                                                                             (1, 3, 1)}
    fixture = ROOT / "tests" / "data" / "torch" / "zeroshot_triplet.legacy.pytorch"  # torch-made, 1-based
    assert zeroshot.convert(fixture, tmp_path / "fixture.json") == 6
    assert json.loads((tmp_path / "fixture.json").read_text())[0] == [0, 0, 32]
    with pytest.raises(common.ConvertError, match="row 0 \\(0-based \\[0, 0, 32\\]\\) and 5 more .* 4 object classes and 3 predicates"):
        zeroshot.convert(fixture, tmp_path / "bad.json", gt=gt)
    assert not (tmp_path / "bad.json").exists()


@pytest.mark.parametrize("value,words", [
    (np.array([[0, 1, 1]]), "1-based"),
    (np.array([1, 2, 3]), "shape \\(3,\\)"),
    (np.array([[1.5, 1, 1]]), "integer"),
    ({"a": 1}, "holds a dict"),
])
def test_bad_zeroshot_files(tmp_path, value, words):
    path = torchsave.save(tmp_path / "z.pytorch", value)
    with pytest.raises(common.ConvertError, match=words):
        zeroshot.convert(path, tmp_path / "z.json")
