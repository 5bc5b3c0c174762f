"""sgeval.Evaluator (issue 28), the in-loop evaluator: update / state_dict / merge / load_state_dict /
reset / sync / compute.

Exactness: an Evaluator fed the demo's predictions as arrays gives the results JSON of
sgeval.evaluate on the same predictions written as a file, byte for byte, in every task and mode
with every protocol; so do halves merged in either order, padded duplicates and two ranks
synced, and any split of the images into shards, any order of updates and any merge tree (a
hypothesis property). compute's two scopes (missing "empty" and "skip"). The argument forms:
the panoptic form, 0/1 integer masks, torch-like tensors, ng_triplets left out, ids compared as
strings. Every bad update and every tampered state is refused with an SGEvalError naming image
and field, and changes nothing; states of another configuration do not merge. sync with a
stand-in all_gather_object over two threads as ranks.
"""

import copy
import json
import pickle
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import BOTTOM, TOP_LEFT, TOP_RIGHT, checked, matching, perfect_case, pred_record, rewrite_json, \
    write_train_gt, write_yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import sgeval

DEMO_EXTRA = "1050"  # a demo test image without relations: its update counts as an extra prediction
DEMO_OUTSIDE = ("1017", "1000001")  # demo records of a training image and of no GT image (update refuses them)
DEMO_MISSING = ("1061", "1067")  # demo GT images that Model A has no record for


# ----------------------------------------------------------------------------------------------
# The demo's predictions as update arguments, and the same predictions written as a file


class Demo:
    """The demo data (31 evaluated images, mask and box mode) and Model A's predictions as update
    arguments: updates = [(image_id, {labels, triplets, ng_triplets, scores, boxes, masks})] in the
    file's order, records outside the GT's test split left out (1050, without relations, kept);
    pred: those predictions written by sgeval.write_predictions (the file path's input)."""

    def __init__(self, folder, out):
        self.gt, self.seg = str(folder / "psg.json"), str(folder / "panoptic")
        psg = json.loads(Path(self.gt).read_text())
        self.sizes = {str(entry["image_id"]): (entry["height"], entry["width"]) for entry in psg["data"]}
        test_ids = set(map(str, psg["test_image_ids"]))
        n_objects, n_predicates = len(psg["thing_classes"]) + len(psg["stuff_classes"]), len(psg["predicate_classes"])
        problems = []
        _, box_records = sgeval.prediction_records(str(folder / "pred.zip"), n_objects, n_predicates, "box", problems)
        boxes = {record.image_id: record.boxes for record in box_records}
        source, records = sgeval.prediction_records(str(folder / "pred.zip"), n_objects, n_predicates, "mask",
                                                    problems)
        self.updates = []
        try:
            for record in records:
                if record.image_id in test_ids:
                    self.updates.append((record.image_id, self._arguments(source, record, boxes[record.image_id])))
        finally:
            source.close()
        assert not problems and len(self.updates) == 30
        self.pred = sgeval.write_predictions(out / "pred.zip", [self.record(*update) for update in self.updates])
        self.references = {}  # see reference()

    def _arguments(self, source, record, boxes):
        height, width = self.sizes[record.image_id]
        n = len(record.categories)
        masks = np.zeros((0, height, width), bool)
        if n:
            bits = sgeval.load_pred_masks(source, record, height, width)
            masks = np.unpackbits(bits.view(np.uint8), axis=1)[:, :height * width].reshape(n, height, width)
        return {"labels": record.categories, "triplets": record.triplets,
                "ng_triplets": None if record.ng_triplets is record.triplets else record.ng_triplets,
                "scores": record.scores, "boxes": boxes, "masks": masks.astype(bool)}

    @staticmethod
    def record(image_id, arguments):
        """The write_predictions record of an update."""
        instances = [{"category": int(c), "bbox": [float(v) for v in box], "score": float(s)}
                     for c, box, s in zip(arguments["labels"], arguments["boxes"], arguments["scores"])]
        record = {"id": image_id, "instances": instances, "triplets": arguments["triplets"],
                  "masks": arguments["masks"]}
        if arguments["ng_triplets"] is not None:
            record["ng_triplets"] = arguments["ng_triplets"]
        return record

    def config(self, mode="mask", task="sgdet", **extra):
        """The config of both paths (pred included, so the results' config sections match). The
        demo's predictions are an SGDet model's: in predcls sgb would refuse their rows on instances
        beyond the GT's (it puts the GT's in place by index, as its tool: test_sgb.py), so it is left
        out there."""
        protocols = [name for name in sgeval.RECALL_PROTOCOLS if task != "predcls" or name != "sgb"]
        values = {"gt": self.gt, "pred": self.pred, "task": task, "protocols": protocols, **extra}
        return {**values, "gt_seg": self.seg} if mode == "mask" else values

    def arguments(self, image_id):
        return next(arguments for known, arguments in self.updates if known == image_id)


@pytest.fixture(scope="module")
def demo(demo_data, tmp_path_factory):
    return Demo(demo_data, tmp_path_factory.mktemp("evaluator-demo"))


def reference(demo, mode="mask", task="sgdet"):
    """json.dumps of sgeval.evaluate on the demo's file (made once per mode and task)."""
    if (mode, task) not in demo.references:
        demo.references[mode, task] = json.dumps(sgeval.evaluate(demo.config(mode, task)))
    return demo.references[mode, task]


def feed(evaluator, updates):
    for image_id, arguments in updates:
        evaluator.update(image_id, **arguments)
    return evaluator


def state_bytes(evaluator):
    """The state as bytes: equal bytes, equal state (dtypes and shapes included)."""
    return pickle.dumps(evaluator.state_dict())


def without_duplicates(results):
    """The results JSON with images.duplicate_updates set to 0 (the one key duplicates change)."""
    results = copy.deepcopy(results)
    results["images"]["duplicate_updates"] = 0
    return json.dumps(results)


# ----------------------------------------------------------------------------------------------
# Arrays give the file's results


@pytest.mark.parametrize("task", sgeval.TASKS)
@pytest.mark.parametrize("mode", ["mask", "box"])
def test_arrays_give_the_results_of_the_file(demo, mode, task):
    """Every update of the demo's predictions as arrays, then compute(): the results JSON equals
    sgeval.evaluate on the same predictions as a file, byte for byte, for every protocol (the
    missing images scored as predicting nothing, the test image without relations an extra)."""
    config = demo.config(mode, task)
    results = feed(sgeval.Evaluator(config), demo.updates).compute()
    assert json.dumps(results) == reference(demo, mode, task)
    assert results["images"] == {"evaluated": 31, "missing_predictions": len(DEMO_MISSING), "skipped_no_relations": 1,
                                 "extra_predictions": 1, "scope": "all", "duplicate_updates": 0}
    assert set(results["by_protocol"]) == set(demo.config(mode, task)["protocols"])


def test_missing_images_score_as_in_a_file_without_their_records(demo, tmp_path):
    """compute(missing='empty') scores GT images without an update as predicting nothing, exactly as
    the file path scores images without a record: five more images left out of both paths, and no
    update at all against a file without records."""
    left_out = {image_id for image_id, _ in demo.updates[3::6]}
    kept = [update for update in demo.updates if update[0] not in left_out]
    pred = sgeval.write_predictions(tmp_path / "pred.zip", [Demo.record(*update) for update in kept])
    expected = sgeval.evaluate(demo.config(pred=pred))
    config = demo.config(pred=pred)
    assert json.dumps(feed(sgeval.Evaluator(config), kept).compute(missing="empty")) == json.dumps(expected)
    assert expected["images"]["missing_predictions"] == len(DEMO_MISSING) + len(left_out)

    empty = sgeval.write_predictions(tmp_path / "empty.zip", [])
    expected = sgeval.evaluate(demo.config(pred=empty))
    assert json.dumps(sgeval.Evaluator(demo.config(pred=empty)).compute()) == json.dumps(expected)
    assert expected["images"]["missing_predictions"] == 31


def test_skip_evaluates_the_updated_images_only(demo, tmp_path):
    """compute(missing='skip') gives the results of a GT holding only the updated images (the
    others deleted from psg.json, so the training split is the same) evaluated from a file, apart
    from the config section (another gt) and images.scope, which says 'updated'."""
    updated = [update for update in demo.updates if update[0] != DEMO_EXTRA][::2]
    kept = {image_id for image_id, _ in updated}
    psg = json.loads(Path(demo.gt).read_text())
    dropped = set(map(str, psg["test_image_ids"])) - kept - {DEMO_EXTRA}
    psg["data"] = [entry for entry in psg["data"] if str(entry["image_id"]) not in dropped]
    psg["test_image_ids"] = [image_id for image_id in psg["test_image_ids"] if str(image_id) not in dropped]
    (tmp_path / "psg.json").write_text(json.dumps(psg))
    pred = sgeval.write_predictions(tmp_path / "pred.zip", [Demo.record(*update) for update in updated])
    expected = sgeval.evaluate(demo.config(gt=str(tmp_path / "psg.json"), pred=pred))

    results = feed(sgeval.Evaluator(demo.config()), updated).compute(missing="skip")
    assert results["images"] == {**expected["images"], "scope": "updated"}
    assert results["images"]["evaluated"] == len(updated) and results["images"]["missing_predictions"] == 0
    for key in set(expected) | set(results):
        if key not in ("config", "images"):
            assert json.dumps(results[key]) == json.dumps(expected[key]), key


def test_skip_with_no_evaluated_update(demo):
    """compute(missing='skip') before any update, or with only the extra image updated: no image
    evaluated, no metric value, no error."""
    evaluator = sgeval.Evaluator(demo.config())
    assert evaluator.compute(missing="skip")["images"]["evaluated"] == 0
    evaluator.update(DEMO_EXTRA, **demo.arguments(DEMO_EXTRA))
    results = evaluator.compute(missing="skip")
    assert results["images"] == {"evaluated": 0, "missing_predictions": 0, "skipped_no_relations": 1,
                                 "extra_predictions": 1, "scope": "updated", "duplicate_updates": 0}
    assert results["metrics"]["R@20"] is None


def test_compute_leaves_the_state_and_updates_go_on(demo):
    """compute (both scopes) changes nothing: called twice it gives the same JSON, the state is
    byte-identical, and updating the rest of the images afterwards gives the file's results."""
    evaluator = feed(sgeval.Evaluator(demo.config()), demo.updates[:12])
    before = state_bytes(evaluator)
    first = json.dumps(evaluator.compute())
    skipped = json.dumps(evaluator.compute(missing="skip"))
    assert json.dumps(evaluator.compute()) == first and json.dumps(evaluator.compute(missing="skip")) == skipped
    assert state_bytes(evaluator) == before
    assert first != reference(demo)
    assert json.dumps(feed(evaluator, demo.updates[12:]).compute()) == reference(demo)


def test_compute_refuses_an_unknown_scope(demo):
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.Evaluator(demo.config()).compute(missing="all")
    assert "missing" in checked(info.value)[0]


def test_evaluator_config_as_config_mapping_or_yaml_without_pred(demo, tmp_path):
    """Evaluator(config) takes a mapping, a Config or a YAML path (str or Path), none of them
    naming pred: the same results JSON from each."""
    values = {key: value for key, value in demo.config().items() if key != "pred"}
    yaml_path = write_yaml(tmp_path, "".join(f"{key}: {json.dumps(value)}\n" for key, value in values.items()))
    outputs = {json.dumps(feed(sgeval.Evaluator(config), demo.updates[:3]).compute())
               for config in (values, sgeval.make_config(values), str(yaml_path), yaml_path)}
    assert len(outputs) == 1


# ----------------------------------------------------------------------------------------------
# Argument forms


def panoptic_of(masks, ids):
    """A segment map of (P, H, W) masks (a later instance paints over an earlier one; id 0 where
    none is) and the masks it holds (what the Panoptic form means)."""
    segment_map = np.zeros(masks.shape[1:], np.int64)
    for mask, segment_id in zip(masks, ids):
        segment_map[mask] = segment_id
    return segment_map, segment_map[None] == np.asarray(ids)[:, None, None]


def test_panoptic_form_equals_the_masks_it_holds(demo):
    """Each demo prediction made panoptic (a segment map; a later instance paints over an earlier
    one, so the instances do not overlap; ids far apart, one instance with id 0, the unpainted
    pixels' value): Panoptic(map, ids) and a plain (map, ids) tuple give the results of the (P, H,
    W) masks the map holds, and those differ from the original (overlapping) masks' results."""
    rng = np.random.default_rng(5)
    as_masks, as_panoptic, as_tuple = [], [], []
    for image_id, arguments in demo.updates:
        n = len(arguments["labels"])
        ids = np.concatenate([[0], rng.choice(1 << 20, n, replace=False) + 1])[rng.permutation(n + 1)[:n]]
        segment_map, masks = panoptic_of(arguments["masks"], ids)
        as_masks.append((image_id, {**arguments, "masks": masks}))
        as_panoptic.append((image_id, {**arguments, "masks": sgeval.Panoptic(segment_map, ids)}))
        as_tuple.append((image_id, {**arguments, "masks": (segment_map.astype(np.int32), ids.astype(np.uint32))}))
    expected = json.dumps(feed(sgeval.Evaluator(demo.config()), as_masks).compute())
    assert json.dumps(feed(sgeval.Evaluator(demo.config()), as_panoptic).compute()) == expected
    assert json.dumps(feed(sgeval.Evaluator(demo.config()), as_tuple).compute()) == expected
    assert expected != reference(demo)


def test_panoptic_form_on_a_hand_case(tmp_path):
    """perfect_case's image 101 (three instances on a 2 x 8 image) as a segment map with ids 7, 3,
    9: the same state as its bool masks, which count as the same update (a duplicate)."""
    values = perfect_case(tmp_path)
    evaluator = sgeval.Evaluator(values)
    segment_map = np.array([[7, 7, 7, 7, 3, 3, 3, 3], [9, 9, 9, 9, 9, 9, 9, 9]], np.uint8)
    arguments = {"labels": np.array([0, 0, 3]), "triplets": np.array([[0, 2, 0], [1, 2, 1]])}
    evaluator.update("101", masks=sgeval.Panoptic(segment_map, np.array([7, 3, 9])), **arguments)
    state = state_bytes(evaluator)
    by_masks = sgeval.Evaluator(values)
    by_masks.update("101", masks=np.stack([TOP_LEFT, TOP_RIGHT, BOTTOM]), **arguments)
    assert state_bytes(by_masks) == state
    evaluator.update("101", masks=np.stack([TOP_LEFT, TOP_RIGHT, BOTTOM]), **arguments)
    assert evaluator.compute()["images"]["duplicate_updates"] == 1


def test_packed_masks_equal_the_masks_they_hold(demo):
    """PackedMasks(np.packbits of each mask's pixels) gives the results of the bool masks, byte for
    byte (the demo's 640 x 480-like sizes and an odd-sized case below), and counts as the same
    update as them; a torch-like tensor on a device is read as the other fields."""
    def packed(masks):
        pixels = masks.shape[1] * masks.shape[2]
        return sgeval.PackedMasks(Tensor(np.packbits(masks.reshape(len(masks), pixels), axis=1)))

    updates = [(image_id, {**arguments, "masks": packed(arguments["masks"])}) for image_id, arguments in demo.updates]
    evaluator = feed(sgeval.Evaluator(demo.config()), updates)
    assert json.dumps(evaluator.compute()) == reference(demo)
    feed(evaluator, demo.updates[:3])  # the bool masks again: the same arrays, duplicates
    assert evaluator.compute()["images"]["duplicate_updates"] == 3


def test_an_update_again_while_the_first_is_evaluated_is_compared_with_it(demo):
    """update digests an image's arrays in the evaluation thread: an update of the same image
    that comes while the first is still evaluated waits for the first's digest. Other masks (one
    pixel changed) are refused and leave the state as after the first; the same arrays count as a
    duplicate."""
    image_id, arguments = demo.updates[0]
    changed = arguments["masks"].copy()
    changed[0, 0, 0] = not changed[0, 0, 0]
    evaluator = sgeval.Evaluator(demo.config())
    evaluator.update(image_id, **arguments)
    with pytest.raises(sgeval.SGEvalError, match="updated twice with different predictions"):
        evaluator.update(image_id, **{**arguments, "masks": changed})
    once = sgeval.Evaluator(demo.config())
    once.update(image_id, **arguments)
    assert state_bytes(evaluator) == state_bytes(once)
    evaluator.update(image_id, **arguments)
    assert evaluator.compute(missing="skip")["images"]["duplicate_updates"] == 1


def test_packed_masks_on_a_hand_case_and_refused_when_malformed(tmp_path):
    """perfect_case's 2 x 8 image: 16 pixels, two bytes a mask (no padding bits), the same state as
    the bool masks. A wrong dtype, shape or row length is refused naming the field; so are padding
    bits set (on a 3 x 3 GT image, 9 pixels: 7 spare bits in the second byte)."""
    values = perfect_case(tmp_path)
    masks = np.stack([TOP_LEFT, TOP_RIGHT, BOTTOM])
    arguments = {"labels": np.array([0, 0, 3]), "triplets": np.array([[0, 2, 0], [1, 2, 1]])}
    packed, by_masks = sgeval.Evaluator(values), sgeval.Evaluator(values)
    packed.update("101", masks=sgeval.PackedMasks(np.packbits(masks.reshape(3, -1), axis=1)), **arguments)
    by_masks.update("101", masks=masks, **arguments)
    assert state_bytes(packed) == state_bytes(by_masks)
    bits = np.packbits(masks.reshape(3, -1), axis=1)
    for bad, words in ((bits.astype(np.int64), "uint8, not int64"), (bits[:, :1], "(3, 2) uint8"),
                       (bits[:2], "(3, 2) uint8")):
        with pytest.raises(sgeval.SGEvalError, match=re.escape(words)):
            packed.update("102", masks=sgeval.PackedMasks(bad), **arguments)
    odd = sgeval.pack_masks(np.ones((1, 3, 3), bool))[:, :1].view(np.uint8)[:, :2].copy()
    assert odd.tolist() == [[255, 128]]
    problems = []
    assert sgeval._packed_masks(odd, 1, 3, 3, "image x", problems) is not None and not problems
    odd[0, 1] |= 1  # a pixel beyond the 9
    assert sgeval._packed_masks(odd, 1, 3, 3, "image x", problems) is None
    assert problems == ["image x: field 'masks' (PackedMasks) sets bits beyond the image's 3 x 3 pixels"]


@pytest.mark.parametrize("dtype", [np.uint8, np.int64, np.int8, np.uint16])
def test_integer_0_1_masks_equal_bool_masks(demo, dtype):
    """Masks given as 0/1 integers of any width give the results of the same bool masks."""
    updates = [(image_id, {**arguments, "masks": arguments["masks"].astype(dtype)})
               for image_id, arguments in demo.updates]
    assert json.dumps(feed(sgeval.Evaluator(demo.config()), updates).compute()) == reference(demo)


class Tensor:
    """The part of a torch tensor that Evaluator.update may use (torch is not installed): a tensor
    on a GPU that requires grad refuses numpy() until detached and moved to the CPU, as torch
    does; and it has no __array__, so only detach().cpu().numpy() reads it."""

    def __init__(self, array, device="cuda:0", requires_grad=True):
        self.array, self.device, self.requires_grad = np.asarray(array), device, requires_grad

    @property
    def ndim(self):
        return self.array.ndim

    def detach(self):
        return Tensor(self.array, self.device, False)

    def cpu(self):
        return Tensor(self.array, "cpu", self.requires_grad)

    def numpy(self):
        if self.requires_grad or self.device != "cpu":
            raise TypeError("can't convert a tensor that requires grad or lives on cuda:0 to numpy")
        return self.array


def test_torch_like_tensors_are_accepted(demo):
    """Every argument as a torch-like tensor (on a GPU, requiring grad), the masks also as a
    Panoptic of two tensors: the results of the numpy arrays."""
    updates = [(image_id, {key: None if value is None else Tensor(value) for key, value in arguments.items()})
               for image_id, arguments in demo.updates]
    assert json.dumps(feed(sgeval.Evaluator(demo.config()), updates).compute()) == reference(demo)

    image_id, arguments = demo.updates[0]
    ids = np.arange(1, len(arguments["labels"]) + 1)
    segment_map, masks = panoptic_of(arguments["masks"], ids)
    by_tensors, by_arrays = sgeval.Evaluator(demo.config()), sgeval.Evaluator(demo.config())
    by_tensors.update(image_id, **{**arguments, "masks": (Tensor(segment_map), Tensor(ids))})
    by_arrays.update(image_id, **{**arguments, "masks": masks})
    assert state_bytes(by_tensors) == state_bytes(by_arrays)


def test_ng_triplets_left_out_are_the_triplets(demo):
    """ng_triplets=None means the triplets are the no-graph-constraint list too: the results of
    passing the triplets again, and not those of another list."""
    image_id, arguments = next(update for update in demo.updates if update[1]["ng_triplets"] is None)
    left_out, repeated, other = (sgeval.Evaluator(demo.config()) for _ in range(3))
    left_out.update(image_id, **arguments)
    repeated.update(image_id, **{**arguments, "ng_triplets": arguments["triplets"].copy()})
    other.update(image_id, **{**arguments, "ng_triplets": arguments["triplets"][::-1].copy()})
    assert json.dumps(left_out.compute()) == json.dumps(repeated.compute()) != json.dumps(other.compute())


def test_image_ids_compare_as_strings(demo):
    """1002, '1002' and np.int64(1002) name the same image: the second and third updates are
    duplicates of the first."""
    evaluator = sgeval.Evaluator(demo.config())
    arguments = demo.arguments("1002")
    for image_id in (1002, "1002", np.int64(1002)):
        evaluator.update(image_id, **arguments)
    results = evaluator.compute(missing="skip")
    assert results["images"]["evaluated"] == 1 and results["images"]["duplicate_updates"] == 2


def test_an_image_without_relations_is_an_extra_prediction(demo):
    """An update of a test image without relations is not evaluated and counts as an extra
    prediction, like its record in a file; again with the same arrays it still counts once (a
    duplicate update); with other arrays it is an error naming it, and the state stays."""
    evaluator = sgeval.Evaluator(demo.config())
    arguments = demo.arguments(DEMO_EXTRA)
    evaluator.update(DEMO_EXTRA, **arguments)
    images = evaluator.compute()["images"]
    assert images["extra_predictions"] == 1 and images["missing_predictions"] == 31
    evaluator.update(DEMO_EXTRA, **arguments)
    assert evaluator.compute()["images"] == {**images, "duplicate_updates": 1}
    before = state_bytes(evaluator)
    with pytest.raises(sgeval.SGEvalError) as info:
        evaluator.update(DEMO_EXTRA, **{**arguments, "triplets": arguments["triplets"][1:]})
    assert matching(checked(info.value), "", DEMO_EXTRA, "different")
    assert state_bytes(evaluator) == before


def test_duplicate_updates_count_once(demo):
    """Padded duplicates (the same image with identical arrays, here the last three images again):
    the results of the file, except images.duplicate_updates == 3."""
    evaluator = feed(sgeval.Evaluator(demo.config()), demo.updates + demo.updates[-3:])
    results = evaluator.compute()
    assert results["images"]["duplicate_updates"] == 3
    assert without_duplicates(results) == reference(demo)


@pytest.mark.parametrize("change", ["labels", "triplets", "ng_triplets", "scores", "masks"])
def test_a_second_update_with_other_arrays_is_refused(demo, change):
    """The same image again with any array changed is an error naming the image; the state stays
    and the results are still the file's."""
    evaluator = feed(sgeval.Evaluator(demo.config()), demo.updates)
    image_id, arguments = demo.updates[0]
    changed = dict(arguments)
    if change == "labels":
        changed["labels"] = (arguments["labels"] + 1) % 133
    elif change == "masks":
        changed["masks"] = arguments["masks"].copy()
        changed["masks"][0, 0, 0] ^= True
    elif change == "scores":
        changed["scores"] = arguments["scores"] + 1e-9
    else:
        rows = arguments[change] if arguments[change] is not None else arguments["triplets"]
        changed[change] = rows[::-1].copy()
    before = state_bytes(evaluator)
    with pytest.raises(sgeval.SGEvalError) as info:
        evaluator.update(image_id, **changed)
    assert matching(checked(info.value), "", image_id, "updated twice")
    assert state_bytes(evaluator) == before
    assert json.dumps(evaluator.compute()) == reference(demo)


# ----------------------------------------------------------------------------------------------
# Bad updates: one SGEvalError line per problem naming the image and the field; nothing changes

MASKS = np.stack([TOP_LEFT, BOTTOM])  # perfect_case's image 102: instances 0 (a horse) and 1 (sky)
GOOD = {"labels": np.array([1, 4]), "triplets": np.array([[0, 1, 2]]), "masks": MASKS,
        "boxes": np.array([[0.0, 0, 4, 1], [0, 1, 8, 2]])}

BAD_UPDATES = {  # name: (mode, changed arguments, the words of the one problem)
    "float labels": ("mask", {"labels": np.array([1.0, 4.0])}, ["'labels'", "integers"]),
    "bool labels": ("mask", {"labels": np.array([True, False])}, ["'labels'", "integers"]),
    "labels not 1-D": ("mask", {"labels": np.array([[1, 4]])}, ["'labels'", "shape"]),
    "labels None": ("mask", {"labels": None}, ["'labels'"]),
    "label out of range": ("mask", {"labels": np.array([1, 5])}, ["instance 1", "category 5"]),
    "negative label": ("mask", {"labels": np.array([-1, 4])}, ["instance 0", "category -1"]),
    "float triplets": ("mask", {"triplets": np.array([[0.0, 1, 2]])}, ["'triplets'", "integers"]),
    "triplets of 2 columns": ("mask", {"triplets": np.array([[0, 1]])}, ["'triplets'", "shape"]),
    "ragged triplets": ("mask", {"triplets": [[0, 1, 2], [0, 1]]}, ["'triplets'", "not an array"]),
    "triplet instance out of range": ("mask", {"triplets": np.array([[0, 2, 2]])}, ["triplet 0", "instance 2"]),
    "triplet predicate out of range": ("mask", {"triplets": np.array([[0, 1, 4]])}, ["triplet 0", "predicate 4"]),
    "ng_triplet out of range": ("mask", {"ng_triplets": np.array([[0, 1, 2], [1, 0, 9]])},
                                ["ng_triplet 1", "predicate 9"]),
    "uint64 beyond int64": ("mask", {"triplets": np.array([[0, 1, 2 ** 63]], np.uint64)}, ["'triplets'", "int64"]),
    "scores of another length": ("mask", {"scores": np.array([0.5])}, ["'scores'", "shape"]),
    "scores NaN": ("mask", {"scores": np.array([0.5, np.nan])}, ["'scores'", "nan"]),
    "masks missing": ("mask", {"masks": None}, ["'masks'", "required"]),
    "float masks": ("mask", {"masks": MASKS.astype(np.float32)}, ["'masks'", "float"]),
    "masks of 255": ("mask", {"masks": MASKS.astype(np.uint8) * 255}, ["'masks'", "0 and 1"]),
    "masks of 2": ("mask", {"masks": MASKS.astype(np.int64) * 2}, ["'masks'", "0 and 1"]),
    "masks of -1": ("mask", {"masks": -MASKS.astype(np.int8)}, ["'masks'", "0 and 1"]),
    "masks of another height": ("mask", {"masks": np.zeros((2, 3, 8), bool)}, ["'masks'", "shape"]),
    "masks of another width": ("mask", {"masks": np.zeros((2, 2, 9), bool)}, ["'masks'", "shape"]),
    "one mask too many": ("mask", {"masks": np.zeros((3, 2, 8), bool)}, ["'masks'", "shape"]),
    "masks (H, W)": ("mask", {"masks": TOP_LEFT}, ["'masks'", "shape"]),
    "panoptic id twice": ("mask", {"masks": sgeval.Panoptic(np.zeros((2, 8), int), np.array([1, 1]))},
                          ["'masks'", "twice"]),
    "panoptic map of floats": ("mask", {"masks": sgeval.Panoptic(np.zeros((2, 8)), np.array([1, 2]))},
                               ["'masks (segment map)'", "integers"]),
    "panoptic map of another size": ("mask", {"masks": sgeval.Panoptic(np.zeros((2, 7), int), np.array([1, 2]))},
                                     ["'masks (segment map)'", "shape"]),
    "panoptic ids of another count": ("mask", {"masks": sgeval.Panoptic(np.zeros((2, 8), int), np.array([1]))},
                                      ["'masks (segment ids)'", "shape"]),
    "boxes missing": ("box", {"boxes": None}, ["'boxes'", "required"]),
    "boxes x2 < x1": ("box", {"boxes": np.array([[0.0, 0, 4, 1], [5, 1, 4, 2]])}, ["instance 1", "'boxes'", "x2 < x1"]),
    "boxes y2 < y1": ("box", {"boxes": np.array([[0.0, 2, 4, 1], [0, 1, 8, 2]])}, ["instance 0", "'boxes'", "y2 < y1"]),
    "boxes inf": ("box", {"boxes": np.array([[0.0, 0, np.inf, 1], [0, 1, 8, 2]])}, ["'boxes'", "inf"]),
    "boxes NaN in mask mode": ("mask", {"boxes": np.array([[0.0, 0, np.nan, 1], [0, 1, 8, 2]])}, ["'boxes'", "nan"]),
    "boxes (P, 5)": ("box", {"boxes": np.zeros((2, 5))}, ["'boxes'", "shape"]),
    "boxes of strings": ("box", {"boxes": np.full((2, 4), "1")}, ["'boxes'", "numbers"]),
}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """perfect_case (images 101-103 on 2 x 8 pixels) in mask and box mode."""
    return {mode: perfect_case(tmp_path_factory.mktemp(f"small-{mode}"), mode=mode) for mode in ("mask", "box")}


def evaluator_of(values):
    """An Evaluator of perfect_case with image 101 updated perfectly."""
    evaluator = sgeval.Evaluator({key: value for key, value in values.items() if key != "pred"})
    evaluator.update("101", labels=np.array([0, 0, 3]), triplets=np.array([[0, 2, 0], [1, 2, 1]]),
                     masks=np.stack([TOP_LEFT, TOP_RIGHT, BOTTOM]), boxes=np.array([[0.0, 0, 4, 1], [4, 0, 8, 1],
                                                                                     [0, 1, 8, 2]]))
    return evaluator


@pytest.mark.parametrize("name", BAD_UPDATES)
def test_a_bad_update_is_refused_and_changes_nothing(small, name):
    """One broken argument of image 102: one problem line naming 'Evaluator.update', image 102 and
    the field; the state is byte-identical afterwards, and the good update is still accepted."""
    mode, changed, words = BAD_UPDATES[name]
    evaluator = evaluator_of(small[mode])
    before = state_bytes(evaluator)
    with pytest.raises(sgeval.SGEvalError) as info:
        evaluator.update("102", **{**GOOD, **changed})
    problems = checked(info.value)
    assert len(problems) == 1 and matching(problems, "Evaluator.update", "102", *words), problems
    assert state_bytes(evaluator) == before
    evaluator.update("102", **GOOD)
    assert evaluator.compute(missing="skip")["metrics"]["R@20"] == 1.0


def test_every_problem_of_an_update_is_listed(small):
    """A label, a triplet, an ng_triplet and the scores wrong at once: four lines, one per problem."""
    evaluator = evaluator_of(small["mask"])
    with pytest.raises(sgeval.SGEvalError) as info:
        evaluator.update("102", **{**GOOD, "labels": np.array([1, 7]), "triplets": np.array([[0, 3, 2]]),
                                   "ng_triplets": np.array([[0, 1, 8]]), "scores": np.array([0.1, np.inf])})
    problems = checked(info.value)
    assert len(problems) == 4, problems
    for words in (["instance 1", "category 7"], ["triplet 0", "instance 3"], ["ng_triplet 0", "predicate 8"],
                  ["'scores'"]):
        assert matching(problems, "Evaluator.update", "102", *words), (words, problems)


def test_update_problems_read_as_the_file_readers(small, tmp_path):
    """The same out-of-range category, triplet and ng_triplet in a prediction file and in an update:
    the same problem lines after the file's name / 'Evaluator.update' (same rules, same words)."""
    values = perfect_case(tmp_path)

    def edit(data):
        record = pred_record(data, "102")
        record["instances"][1]["category"] = 5
        record["triplets"], record["ng_triplets"] = [[0, 1, 2], [2, 1, 0]], [[0, 1, 4], [-1, 0, 0]]

    rewrite_json(values["pred"], edit)
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.evaluate(values)
    from_file = [problem.removeprefix(f"{values['pred']}: ") for problem in checked(info.value)]
    with pytest.raises(sgeval.SGEvalError) as info:
        evaluator_of(small["mask"]).update("102", **{**GOOD, "labels": [1, 5], "triplets": [[0, 1, 2], [2, 1, 0]],
                                                     "ng_triplets": [[0, 1, 4], [-1, 0, 0]]})
    from_update = [problem.removeprefix("Evaluator.update: ") for problem in checked(info.value)]
    assert from_update == from_file and len(from_file) == 4


def test_empty_rows_and_instances(small):
    """No instances and no rows, as empty lists or (0,) / (0, 3) arrays, is a valid update (it
    predicts nothing): the results of no update at all, apart from missing_predictions."""
    for triplets in ([], np.zeros((0, 3), np.int64), np.zeros(0, np.float32)):
        evaluator = sgeval.Evaluator({key: value for key, value in small["mask"].items() if key != "pred"})
        evaluator.update("102", labels=np.zeros(0, np.int64), triplets=triplets, ng_triplets=triplets)
        results, nothing = evaluator.compute(), sgeval.Evaluator(evaluator.config).compute()
        assert results["images"]["missing_predictions"] == 2 and results["metrics"] == nothing["metrics"]


def test_unknown_image_ids_and_the_dataset_index_hint(demo):
    """An id outside the GT's test split is refused, naming the image; a number below the count of
    evaluated images also gets a hint naming the image_id at that index (0 -> 1002, 30 -> 1078);
    31 (one past the last index), a training image's id and an id of no GT image get none."""
    evaluator = sgeval.Evaluator(demo.config())
    arguments = demo.arguments("1002")

    def problem(image_id):
        with pytest.raises(sgeval.SGEvalError) as info:
            evaluator.update(image_id, **arguments)
        problems = checked(info.value)
        assert len(problems) == 1 and matching(problems, "Evaluator.update", image_id, "test split"), problems
        return problems[0]

    assert "dataset index" in problem(0) and "image_id 1002" in problem(0)
    assert "dataset index" in problem("30") and "image_id 1078" in problem("30")
    for image_id in ("31", *DEMO_OUTSIDE, "x1002"):
        assert "dataset index" not in problem(image_id)
    assert evaluator.state_dict()["slots"].size == 0


# ----------------------------------------------------------------------------------------------
# States: state_dict, load_state_dict, merge, reset, sync


def test_state_dict_is_plain_and_pickles(demo):
    """state_dict() holds only plain Python values and numpy arrays; pickled and loaded into a
    fresh Evaluator it computes the same results and gives the same state back."""
    evaluator = feed(sgeval.Evaluator(demo.config()), demo.updates + demo.updates[:2])
    state = evaluator.state_dict()
    for value in state.values():
        assert type(value) in (int, str, list, np.ndarray), type(value)
        assert not isinstance(value, np.ndarray) or value.dtype.kind in "iu"
    loaded = sgeval.Evaluator(demo.config())
    loaded.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert json.dumps(loaded.compute()) == json.dumps(evaluator.compute())
    assert state_bytes(loaded) == pickle.dumps(state)
    assert without_duplicates(loaded.compute()) == reference(demo)


def test_load_state_dict_replaces_the_state(demo):
    """load_state_dict replaces whatever was updated before (it does not add)."""
    source = feed(sgeval.Evaluator(demo.config()), demo.updates[:5])
    target = feed(sgeval.Evaluator(demo.config()), demo.updates[5:])
    target.load_state_dict(source.state_dict())
    assert state_bytes(target) == state_bytes(source)


def test_reset_forgets_every_update(demo):
    """After reset the state and the results are those of a fresh Evaluator; updates then work."""
    evaluator = feed(sgeval.Evaluator(demo.config()), demo.updates[:20])
    evaluator.reset()
    fresh = sgeval.Evaluator(demo.config())
    assert state_bytes(evaluator) == state_bytes(fresh)
    assert json.dumps(evaluator.compute()) == json.dumps(fresh.compute())
    assert json.dumps(feed(evaluator, demo.updates).compute()) == reference(demo)


def test_merge_of_two_halves_and_a_conflict(demo):
    """Two halves merged (as an Evaluator, or as a pickled state_dict) give the file's results and,
    merged in the other order, the same state byte for byte. A merge in which an image's
    predictions differ is refused naming the image, and leaves the receiving state exactly as it
    was (none of the other images merged either)."""
    first = feed(sgeval.Evaluator(demo.config()), demo.updates[::2])
    second = feed(sgeval.Evaluator(demo.config()), demo.updates[1::2])
    merged = sgeval.Evaluator(demo.config()).merge(first).merge(pickle.loads(pickle.dumps(second.state_dict())))
    assert json.dumps(merged.compute()) == reference(demo)
    assert state_bytes(sgeval.Evaluator(demo.config()).merge(second).merge(first)) == state_bytes(merged)

    image_id, arguments = demo.updates[0]
    rival = feed(sgeval.Evaluator(demo.config()), demo.updates[1::2])
    rival.update(image_id, **{**arguments, "scores": arguments["scores"][::-1].copy()})
    before = state_bytes(first)
    with pytest.raises(sgeval.SGEvalError) as info:
        first.merge(rival)
    assert matching(checked(info.value), "", image_id, "different")
    assert state_bytes(first) == before


def other_configurations(tmp_path, values):
    """Configs of perfect_case (mask mode) that change one thing in the fingerprint each."""
    gt_bytes = tmp_path / "psg-spaced.json"
    gt_bytes.write_text(Path(values["gt"]).read_text() + "\n")
    train = write_train_gt(tmp_path / "train.json", [([0, 0, 3], [[0, 2, 0]])])
    zeroshot = tmp_path / "zeroshot.json"
    zeroshot.write_text("[[0, 3, 0]]")
    return {"k": {"k": ["20"]}, "imr_k": {"imr_k": ["10"]}, "protocols": {"protocols": ["sgb"]},
            "headline protocol": {"protocol": "multimpo"}, "task": {"task": "predcls"},
            "iou_threshold": {"iou_threshold": 0.75}, "audit": {"audit": False}, "confusion_k": {"confusion_k": "20"},
            "box mode": {"gt_seg": None}, "GT bytes": {"gt": str(gt_bytes)}, "train_gt": {"train_gt": str(train)},
            "zeroshot_triplets": {"zeroshot_triplets": str(zeroshot)}}


@pytest.mark.parametrize("change", ["k", "imr_k", "protocols", "headline protocol", "task", "iou_threshold", "audit",
                                    "confusion_k", "box mode", "GT bytes", "train_gt", "zeroshot_triplets",
                                    "sgeval version"])
def test_a_state_of_another_configuration_is_refused(tmp_path, monkeypatch, change):
    """A state made under another fingerprint (one setting, file or the version changed) is refused
    by merge and load_state_dict, as an Evaluator and as a state_dict, and nothing changes."""
    values = perfect_case(tmp_path)
    evaluator = evaluator_of(values)
    before = state_bytes(evaluator)
    if change == "sgeval version":
        with monkeypatch.context() as patch:
            patch.setattr(sgeval, "__version__", sgeval.__version__ + ".1")
            other = evaluator_of(values)
            other.fingerprint()
    else:
        other = evaluator_of({**values, **other_configurations(tmp_path, values)[change]})
    assert other.fingerprint() != evaluator.fingerprint()
    for attempt in (lambda: evaluator.merge(other), lambda: evaluator.merge(other.state_dict()),
                    lambda: evaluator.load_state_dict(other.state_dict())):
        with pytest.raises(sgeval.SGEvalError) as info:
            attempt()
        assert "another configuration" in checked(info.value)[0]
        assert state_bytes(evaluator) == before


def test_settings_outside_the_fingerprint_merge(tmp_path):
    """Settings that only aggregate counts or name things (metrics, aggregation, absent_predicates,
    wimr_tau, model, workers) and a byte-identical GT at another path do not stop a merge;
    the merged results follow the receiver's config (its evaluate on the same file)."""
    values = perfect_case(tmp_path)
    copy_folder = tmp_path / "copy"
    copy_folder.mkdir()
    (copy_folder / "psg.json").write_bytes(Path(values["gt"]).read_bytes())
    other = evaluator_of({**values, "gt": str(copy_folder / "psg.json"), "metrics": ["R"], "aggregation": "pooled",
                          "absent_predicates": "zero", "wimr_tau": 1.0, "model": "other", "workers": 2})
    other.update("103", labels=np.array([0, 3]), triplets=np.array([[0, 1, 3]]), masks=np.stack([TOP_LEFT, BOTTOM]))
    receiver = sgeval.Evaluator(values)
    receiver.merge(other)
    receiver.update("102", **GOOD)
    assert json.dumps(receiver.compute()) == json.dumps(sgeval.evaluate(values))


def tampered(state, name):
    """A copy of a state (of the demo: image slots 0-2 and the extra image) broken one way."""
    state = copy.deepcopy(state)
    values, offsets = state["values"].astype(np.int64), state["offsets"]
    if name == "not a dict":
        return list(state.items())
    if name == "no sgeval_state":
        del state["sgeval_state"]
    elif name == "sgeval_state 2":
        state["sgeval_state"] = 2
    elif name == "another fingerprint":
        state["fingerprint"] = "0" * 64
    elif name == "no values":
        del state["values"]
    elif name == "values cut short":
        state["values"], state["offsets"] = values[:-1], np.minimum(offsets, len(values) - 1)
    elif name == "values one too long":
        state["values"], state["offsets"] = np.append(values, 0), offsets + (np.arange(len(offsets)) == 3)
    elif name == "offsets not covering the values":
        state["offsets"] = offsets[:-1]
        state["slots"], state["updates"], state["digests"] = (state[k][:-1] for k in ("slots", "updates", "digests"))
    elif name == "offsets decreasing":
        state["offsets"] = np.array([0, offsets[2], offsets[1], offsets[3]])
    elif name == "slot out of range":
        state["slots"] = np.array([0, 1, 31])
    elif name == "negative slot":
        state["slots"] = np.array([-1, 1, 2])
    elif name == "slot repeated":
        state["slots"] = np.array([0, 1, 1])
    elif name == "update count 0":
        state["updates"] = np.array([1, 0, 1])
    elif name == "digests of 8 bytes":
        state["digests"] = state["digests"][:, :8]
    elif name == "float values":
        state["values"] = values.astype(np.float64)
    elif name == "predicate column out of range":
        values[1] = 56
        state["values"] = values
    elif name == "columns count beyond the record":
        values[0] = 200
        state["values"] = values
    elif name == "extra id of an evaluated image":
        state["extra_ids"] = ["1002"]
    elif name == "extra id repeated":
        state["extra_ids"], state["extra_updates"] = [DEMO_EXTRA] * 2, np.array([1, 1])
        state["extra_digests"] = np.repeat(state["extra_digests"], 2, axis=0)
    elif name == "extra update count 0":
        state["extra_updates"] = np.array([0])
    elif name == "extra ids not a list":
        state["extra_ids"] = 5
    elif name == "other_records -1":
        state["other_records"] = -1
    elif name == "other_records 1.5":
        state["other_records"] = 1.5
    elif name == "slots None":
        state["slots"] = None
    elif name == "fingerprint an array":
        state["fingerprint"] = np.array([state["fingerprint"]] * 2)
    elif name == "extra digest of 3 bytes":
        state["extra_digests"] = np.array([[1, 2, 3]], np.uint8)
    elif name == "extra digest beyond a byte":
        state["extra_digests"] = [[300] * sgeval.DIGEST]
    elif name == "a negative count":
        values[-1] = -3  # the last CHECK_FIELDS count of image slot 2
        state["values"] = values
    else:
        raise AssertionError(name)
    return state


TAMPERINGS = ["not a dict", "no sgeval_state", "sgeval_state 2", "another fingerprint", "no values", "values cut short",
              "values one too long", "offsets not covering the values", "offsets decreasing", "slot out of range",
              "negative slot", "slot repeated", "update count 0", "digests of 8 bytes", "float values",
              "predicate column out of range", "columns count beyond the record", "extra id of an evaluated image",
              "extra id repeated", "extra update count 0", "extra ids not a list", "other_records -1",
              "other_records 1.5", "slots None", "fingerprint an array", "extra digest of 3 bytes",
              "extra digest beyond a byte", "a negative count"]


@pytest.mark.parametrize("name", TAMPERINGS)
def test_a_tampered_state_is_refused_and_changes_nothing(demo, name):
    """A state_dict broken one way: load_state_dict and merge raise an SGEvalError (never another
    exception), and the receiving Evaluator's state is byte-identical afterwards."""
    source = feed(sgeval.Evaluator(demo.config()), demo.updates[:3] + [(DEMO_EXTRA, demo.arguments(DEMO_EXTRA))])
    state = tampered(source.state_dict(), name)
    receiver = feed(sgeval.Evaluator(demo.config()), demo.updates[3:6])
    before = state_bytes(receiver)
    for method in (receiver.load_state_dict, receiver.merge):
        with pytest.raises(sgeval.SGEvalError) as info:
            method(state)
        checked(info.value)
        assert state_bytes(receiver) == before


def test_the_untampered_state_is_accepted(demo):
    """The control of the tampering test: the same state unbroken loads and merges."""
    extra = [(DEMO_EXTRA, demo.arguments(DEMO_EXTRA))]
    source = feed(sgeval.Evaluator(demo.config()), demo.updates[:3] + extra)
    receiver = feed(sgeval.Evaluator(demo.config()), demo.updates[3:6])
    receiver.merge(copy.deepcopy(source.state_dict()))
    expected = feed(sgeval.Evaluator(demo.config()), demo.updates[:6] + extra).compute()
    assert json.dumps(receiver.compute()) == json.dumps(expected)


class Gather:
    """A stand-in for torch.distributed.all_gather_object among world_size threads (the ranks):
    each rank's object, pickled as torch pickles it, lands at the rank's index of every rank's
    output list, once all ranks have called it."""

    def __init__(self, world_size):
        self.world_size, self.objects = world_size, [None] * world_size
        self.arrived, self.left = threading.Barrier(world_size, timeout=60), threading.Barrier(world_size, timeout=60)

    def for_rank(self, rank):
        def all_gather_object(output, obj):
            assert len(output) == self.world_size
            self.objects[rank] = pickle.dumps(obj)
            self.arrived.wait()
            output[:] = [pickle.loads(data) for data in self.objects]
            self.left.wait()

        return all_gather_object

    def run(self, evaluators):
        """sync on every rank at once; each rank's outcome (the Evaluator, or the exception)."""
        def sync(rank):
            try:
                return evaluators[rank].sync(all_gather_object=self.for_rank(rank), world_size=self.world_size)
            except Exception as error:  # noqa: BLE001 - the test looks at it
                return error

        with ThreadPoolExecutor(self.world_size) as pool:
            return list(pool.map(sync, range(self.world_size)))


def test_sync_of_two_ranks(demo):
    """Two ranks (threads) holding a DistributedSampler-like split, the last images padded onto
    rank 1 again: after sync both hold the same state, and both compute the file's results, with
    the padded duplicates counted in duplicate_updates."""
    ranks = [feed(sgeval.Evaluator(demo.config()), demo.updates[rank::2]) for rank in range(2)]
    feed(ranks[1], demo.updates[:2])
    outcomes = Gather(2).run(ranks)
    assert outcomes == ranks
    assert state_bytes(ranks[0]) == state_bytes(ranks[1])
    for evaluator in ranks:
        results = evaluator.compute()
        assert results["images"]["duplicate_updates"] == 2 and without_duplicates(results) == reference(demo)
    synced = state_bytes(ranks[0])
    assert Gather(2).run(ranks) == ranks  # a second sync: every rank holds the union already
    assert state_bytes(ranks[0]) == state_bytes(ranks[1]) == synced


def test_sync_without_torch_is_a_no_op(demo):
    """Without a stand-in and without a torch.distributed process group, sync leaves the state as
    it is."""
    evaluator = feed(sgeval.Evaluator(demo.config()), demo.updates[:4])
    before = state_bytes(evaluator)
    assert evaluator.sync() is evaluator and state_bytes(evaluator) == before


def test_a_failed_sync_changes_no_rank(demo):
    """Two ranks predicted one image differently: sync fails on both ranks with an SGEvalError
    naming the image, and each rank keeps its own state (as a failed merge does)."""
    image_id, arguments = demo.updates[0]
    ranks = [feed(sgeval.Evaluator(demo.config()), demo.updates[rank::2]) for rank in range(2)]
    ranks[1].update(image_id, **{**arguments, "triplets": arguments["triplets"][::-1].copy()})
    before = [state_bytes(evaluator) for evaluator in ranks]
    outcomes = Gather(2).run(ranks)
    assert all(isinstance(outcome, sgeval.SGEvalError) for outcome in outcomes), outcomes
    assert [state_bytes(evaluator) for evaluator in ranks] == before


# ----------------------------------------------------------------------------------------------
# Gaps the first version of update's checks had


def test_triplets_none_is_refused(small):
    """triplets=None (not an array) is an SGEvalError naming field 'triplets', and nothing changes."""
    evaluator = evaluator_of(small["mask"])
    with pytest.raises(sgeval.SGEvalError) as info:
        evaluator.update("102", **{**GOOD, "triplets": None})
    assert matching(checked(info.value), "Evaluator.update", "102", "'triplets'")


def test_an_id_of_unicode_digits_is_an_unknown_image(small):
    """'²' is not an image of the GT: the unknown-image SGEvalError (no traceback)."""
    with pytest.raises(sgeval.SGEvalError) as info:
        evaluator_of(small["mask"]).update("²", **GOOD)
    assert matching(checked(info.value), "Evaluator.update", "²", "test split")


@pytest.mark.parametrize("shape", [(1, 0), (2, 0), (0, 5), (3, 0, 3)], ids=str)
def test_empty_rows_of_a_wrong_shape_are_refused(small, shape):
    """Empty triplets whose shape is not (0,) or (0, 3) are refused like the file's [[]]."""
    with pytest.raises(sgeval.SGEvalError) as info:
        evaluator_of(small["mask"]).update("102", **{**GOOD, "triplets": np.zeros(shape, np.int64)})
    assert matching(checked(info.value), "Evaluator.update", "102", "'triplets'")


@pytest.mark.parametrize("tail", [(), (160,), (120, 159)], ids=["(P,)", "(P, 160)", "(P, 120, 159)"])
def test_masks_of_an_image_without_relations_are_checked(demo, tail):
    """Masks of the extra image 1050 (120 x 160 in psg.json) that are not (P, 120, 160) are refused."""
    arguments = demo.arguments(DEMO_EXTRA)
    masks = np.zeros((len(arguments["labels"]), *tail), bool)
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.Evaluator(demo.config()).update(DEMO_EXTRA, **{**arguments, "masks": masks})
    assert matching(checked(info.value), "Evaluator.update", DEMO_EXTRA, "'masks'")


# ----------------------------------------------------------------------------------------------
# The property: any sharding, update order, merge tree and padding gives the file's results

RANKS = 4


@pytest.fixture(scope="module")
def rank_pool(demo):
    """RANKS Evaluators per mode, reset by each example (building them once keeps the test fast)."""
    return {mode: [sgeval.Evaluator(demo.config(mode)) for _ in range(RANKS)] for mode in ("mask", "box")}


@settings(max_examples=40, derandomize=True, deadline=None)
@given(data=st.data())
def test_any_sharding_order_padding_and_merge_tree(demo, rank_pool, data):
    """The demo's images (the extra one included) spread over 1-4 ranks in any way, updated in any
    interleaved order, up to 6 padded duplicates on any rank, then the ranks merged pairwise in a
    random tree (each merge passing an Evaluator, its state_dict or a pickled copy): the results
    JSON equals the file's in mask and box mode, apart from images.duplicate_updates, which counts
    the padding."""
    mode = data.draw(st.sampled_from(["mask", "box"]), label="mode")
    n_ranks = data.draw(st.integers(1, RANKS), label="ranks")
    n_images = len(demo.updates)
    ranks = data.draw(st.lists(st.integers(0, n_ranks - 1), min_size=n_images, max_size=n_images), label="shards")
    padding = data.draw(st.lists(st.tuples(st.integers(0, n_images - 1), st.integers(0, n_ranks - 1)), max_size=6),
                        label="padding")
    plan = data.draw(st.permutations(list(enumerate(ranks)) + padding), label="order")
    evaluators = rank_pool[mode][:n_ranks]
    for evaluator in evaluators:
        evaluator.reset()
    for index, rank in plan:
        evaluators[rank].update(demo.updates[index][0], **demo.updates[index][1])
    live = list(evaluators)
    while len(live) > 1:
        target = live.pop(data.draw(st.integers(0, len(live) - 1), label="target"))
        source = live.pop(data.draw(st.integers(0, len(live) - 1), label="source"))
        form = data.draw(st.sampled_from(["evaluator", "state", "pickled"]), label="form")
        target.merge(source if form == "evaluator" else source.state_dict() if form == "state" else
                     pickle.loads(pickle.dumps(source.state_dict())))
        live.append(target)
    results = live[0].compute()
    assert results["images"]["duplicate_updates"] == len(padding)
    assert without_duplicates(results) == reference(demo, mode)


def test_row_scores_are_checked_and_part_of_the_digest(tmp_path):
    """triplet_scores / ng_triplet_scores: one finite number per row, only with their rows; a
    repeat with other scores is another prediction."""
    values = perfect_case(tmp_path, mode="box")
    evaluator = sgeval.Evaluator({"gt": values["gt"]})
    arrays = {"labels": [0, 0, 3], "boxes": [[0, 0, 3, 0], [4, 0, 7, 0], [0, 1, 7, 1]],
              "triplets": [[0, 2, 0], [1, 2, 1]]}
    for extra, words in (({"triplet_scores": [0.5]}, "field 'triplet_scores' has 1 scores for 2 rows of 'triplets'"),
                         ({"triplet_scores": [0.5, np.nan]}, "field 'triplet_scores' holds NaN or inf"),
                         ({"ng_triplet_scores": [0.5, 0.4]}, "field 'ng_triplet_scores' is given without 'ng_triplets'")):
        with pytest.raises(sgeval.SGEvalError, match=re.escape(words)):
            evaluator.update("101", **arrays, **extra)
    evaluator.update("101", **arrays, triplet_scores=[0.5, 0.4])
    evaluator.update("101", **arrays, triplet_scores=[0.5, 0.4])
    with pytest.raises(sgeval.SGEvalError, match="updated twice with different predictions"):
        evaluator.update("101", **arrays, triplet_scores=[0.5, 0.3])
    assert evaluator.compute()["images"]["duplicate_updates"] == 1
