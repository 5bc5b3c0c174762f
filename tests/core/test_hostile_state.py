"""The Evaluator against a hostile caller (issue 36): a sync whose stand-in is given a bad
world_size refuses and leaves every update; a state that is well formed but impossible (hits
beyond the GT's counts, hits that decrease as k grows, GT counts that are not the image's,
absurd counts) is refused by load_state_dict and merge, which change nothing, while every valid
state still loads; an exception other than SGEvalError in an Evaluator thread surfaces once and
leaves the Evaluator usable; an image id whose str() raises is one clean error."""

import copy
import pickle

import numpy as np
import pytest
from conftest import checked, perfect_case

import sgeval

PROTOCOLS = ["unique", "singlempo", "multimpo", "openpsg", "sgb"]


def make_evaluator(tmp_path, **extra):
    """An Evaluator of perfect_case (images 101-103, mask mode) with every recall protocol, the
    confusion cells and a relative cut-off."""
    values = perfect_case(tmp_path)
    del values["pred"]
    return sgeval.Evaluator({**values, "k": ["1", "20", "x1"], "protocols": PROTOCOLS, "confusion_k": "20",
                             "audit": True, **extra})


def perfect_update(evaluator, image_id):
    """update() arguments predicting a GT image exactly (its masks, labels and relations)."""
    image = evaluator.gt.images[evaluator.slot_of[image_id]]
    bits = sgeval.load_gt_masks(image).copy()
    masks = np.unpackbits(bits.view(np.uint8), axis=1)[:, :image.height * image.width]
    return {"labels": image.categories, "masks": masks.reshape(-1, image.height, image.width).astype(bool),
            "triplets": image.relations}


@pytest.fixture
def filled(tmp_path):
    """(an Evaluator holding every image of perfect_case, its state_dict)."""
    evaluator = make_evaluator(tmp_path)
    for image_id in ("101", "102", "103"):
        evaluator.update(image_id, **perfect_update(evaluator, image_id))
    return evaluator, evaluator.state_dict()


def fresh(evaluator):
    """An empty copy of an Evaluator (the same GT and settings)."""
    other = copy.deepcopy(evaluator)
    other.reset()
    return other


# ----------------------------------------------------------------------------------------------
# sync


def gather_copies(output, state):
    output[:] = [copy.deepcopy(state) for _ in output]


@pytest.mark.parametrize("world_size", [0, -1, -(2 ** 70), None, 2.0, True, "2", 10 ** 9, [2], float("nan")])
def test_sync_refuses_a_world_size_that_is_not_a_number_of_ranks(filled, world_size):
    evaluator, state = filled
    problems = checked(pytest.raises(sgeval.SGEvalError, evaluator.sync, gather_copies, world_size).value)
    assert len(problems) == 1 and "world_size must be the number of ranks" in problems[0]
    assert pickle.dumps(evaluator.state_dict()) == pickle.dumps(state)  # no update lost


@pytest.mark.parametrize("stand_in", [None, "all_gather_object", 3, object()])
def test_sync_refuses_a_stand_in_that_cannot_be_called(filled, stand_in):
    evaluator, state = filled
    if stand_in is None:  # world_size without all_gather_object: nothing to call it with, no torch
        assert evaluator.sync(None, 2) is evaluator
    else:
        problems = checked(pytest.raises(sgeval.SGEvalError, evaluator.sync, stand_in, 2).value)
        assert "all_gather_object must be callable" in problems[0]
    assert pickle.dumps(evaluator.state_dict()) == pickle.dumps(state)


@pytest.mark.parametrize("gathered", [[None, None], ["state", 1], [{}, {}], [[], None]])
def test_sync_with_junk_gathered_changes_nothing(filled, gathered):
    evaluator, state = filled

    def stand_in(output, _):
        output[:] = gathered

    checked(pytest.raises(sgeval.SGEvalError, evaluator.sync, stand_in, 2).value)
    assert pickle.dumps(evaluator.state_dict()) == pickle.dumps(state)


def test_sync_with_a_failing_stand_in_changes_nothing(filled):
    evaluator, state = filled

    def stand_in(output, _):
        raise RuntimeError("NCCL error")

    with pytest.raises(RuntimeError, match="NCCL"):
        evaluator.sync(stand_in, 2)
    assert pickle.dumps(evaluator.state_dict()) == pickle.dumps(state)


@pytest.mark.parametrize("world_size", [1, 2, np.int64(3)])
def test_sync_of_copies_keeps_the_state(filled, world_size):
    evaluator, state = filled
    before = evaluator.compute()
    evaluator.sync(gather_copies, world_size)
    assert pickle.dumps(evaluator.state_dict()) == pickle.dumps(state) and evaluator.compute() == before


# ----------------------------------------------------------------------------------------------
# Impossible states


def edited(state, evaluator, edit, slot_index=0):
    """A copy of state whose record slot_index was changed by edit(fields, counts): fields
    {protocol: {field: array view}} and counts {"columns", "cells": {protocol: (2, U)}, "audit",
    "check"} of the unpacked record, changed in place."""
    state = copy.deepcopy(state)
    offsets = state["offsets"]
    start, stop = offsets[slot_index], offsets[slot_index + 1]
    columns, fields, audit, check = sgeval.unpack_record(state["values"][start:stop], evaluator.settings)
    edit(fields, {"columns": columns, "cells": {p: counts["confusion"] for p, counts in fields.items()},
                  "audit": audit, "check": check})
    record = columns.base  # the unpacked int64 copy the views above belong to
    values = np.concatenate([state["values"][:start].astype(np.int64), record,
                             state["values"][stop:].astype(np.int64)])
    state["values"] = values
    state["offsets"] = np.concatenate([offsets[:slot_index + 1], offsets[slot_index + 1:] + len(record) - (stop - start)])
    return state


def _hits_beyond_gt(fields, _):
    fields["unique"]["gc_hits"][0] = fields["unique"]["gt_rel"] + 1


def _hits_decrease(fields, _):
    fields["openpsg"]["gc_hits"][1] = 0  # k = 20 (R@1 hits its relations)


def _gt_count_grows(fields, _):
    fields["sgb"]["gt_rel"][0] += 5


def _pairs_beyond(fields, _):
    fields["multimpo"]["pair_hits"][:] = fields["multimpo"]["gt_pairs"] + 1


def _instances_beyond(fields, _):
    fields["singlempo"]["inst_hits"][...] = fields["singlempo"]["gt_inst"] + 1


def _rank_sum_huge(fields, _):
    fields["unique"]["rank_sum"][0] = 2 ** 62


def _zero_shot_beyond(fields, _):
    fields["unique"]["z_gt"][...] = 1
    fields["unique"]["z_gc_hits"][:] = 2


def _imr_decreases(fields, _):
    fields["unique"]["imr_hits"][2] = 0  # imr_k 50 below imr_k 10


def _confusion_off(fields, counts):
    counts["cells"]["unique"][1] += 1  # more confusion triplets than GT triplets


def _columns_moved(fields, counts):
    counts["columns"][0] = (counts["columns"][0] + 1) % 4


def _rows_beyond(fields, counts):
    counts["check"][1] = counts["check"][0] + 1  # rows_on_gt_pairs > rows


def _audit_huge(fields, counts):
    counts["audit"][0] = 2 ** 50


IMPOSSIBLE = [_hits_beyond_gt, _hits_decrease, _gt_count_grows, _pairs_beyond, _instances_beyond, _rank_sum_huge,
              _zero_shot_beyond, _imr_decreases, _confusion_off, _columns_moved, _rows_beyond, _audit_huge]


@pytest.mark.parametrize("edit", IMPOSSIBLE, ids=[edit.__name__.strip("_") for edit in IMPOSSIBLE])
@pytest.mark.parametrize("method", ["load_state_dict", "merge"])
def test_an_impossible_record_is_refused_and_changes_nothing(filled, edit, method):
    evaluator, state = filled
    bad = edited(state, evaluator, edit)
    target = fresh(evaluator) if method == "load_state_dict" else evaluator
    before = pickle.dumps(target.state_dict())
    problems = checked(pytest.raises(sgeval.SGEvalError, getattr(target, method), bad).value)
    assert all(problem.startswith("state_dict: image 101: ") for problem in problems), problems
    assert pickle.dumps(target.state_dict()) == before


@pytest.mark.parametrize("key, value", [("updates", 2 ** 41), ("other_records", 10 ** 5000),
                                        ("other_records", 2 ** 41)], ids=["updates", "5000 digits", "2**41"])
def test_absurd_counts_are_refused(filled, key, value):
    evaluator, state = filled
    bad = copy.deepcopy(state)
    if key == "updates":
        bad["updates"] = np.array([value] + bad["updates"][1:].tolist(), np.int64)
    else:
        bad[key] = value
    for method in ("load_state_dict", "merge"):
        problems = checked(pytest.raises(sgeval.SGEvalError, getattr(fresh(evaluator), method), bad).value)
        assert key in problems[0] or "update count" in problems[0]


def test_merges_cannot_add_other_records_beyond_the_limit(filled):
    evaluator, state = filled
    half = {**copy.deepcopy(state), "slots": state["slots"][:0], "updates": state["updates"][:0],
            "digests": state["digests"][:0], "offsets": state["offsets"][:1], "values": state["values"][:0],
            "other_records": sgeval.MAX_COUNT // 2 + 1}
    evaluator.merge(half)
    before = pickle.dumps(evaluator.state_dict())
    checked(pytest.raises(sgeval.SGEvalError, evaluator.merge, half).value)
    assert pickle.dumps(evaluator.state_dict()) == before


@pytest.mark.parametrize("extra", [{}, {"task": "predcls"}, {"task": "sgcls"}, {"subsets": ["people=objects-either:person"]},
                                   {"gt_seg": None, "protocols": ["oi"], "protocol": "sgb"}])
def test_every_valid_state_still_loads(tmp_path, extra):
    """Perfect, empty (legacy protocols leave the image out) and partial updates under several
    settings: their state loads back and merges as itself."""
    evaluator = make_evaluator(tmp_path, **extra)
    for image_id in ("101", "102", "103"):
        arguments = perfect_update(evaluator, image_id) if evaluator.settings.mode == "mask" else box_update(
            evaluator, image_id)
        if image_id == "102":  # predicts nothing
            arguments = {name: value[:0] for name, value in arguments.items()}
            arguments.pop("masks", None)
        if image_id == "103":  # one relation fewer, one extra row
            arguments["triplets"] = np.concatenate([arguments["triplets"][1:], [[1, 0, 1]]])
        evaluator.update(image_id, **arguments)
    state = evaluator.state_dict()
    loaded = fresh(evaluator)
    loaded.load_state_dict(state)
    loaded.merge(fresh(evaluator).state_dict())
    assert pickle.dumps(loaded.state_dict()) == pickle.dumps(state)
    assert loaded.compute() == evaluator.compute()


def box_update(evaluator, image_id):
    image = evaluator.gt.images[evaluator.slot_of[image_id]]
    n = len(image.categories)
    scores = np.linspace(0.9, 0.5, len(image.relations))
    return {"labels": image.categories, "boxes": image.boxes, "scores": np.full(n, 0.9), "triplets": image.relations,
            "triplet_scores": scores}


# ----------------------------------------------------------------------------------------------
# A failure inside an Evaluator thread


@pytest.mark.parametrize("error", [RuntimeError("CUDA error"), TypeError("bad"), KeyError("x"), MemoryError()])
def test_a_failure_in_a_thread_surfaces_once_and_the_evaluator_goes_on(tmp_path, monkeypatch, error):
    evaluator = make_evaluator(tmp_path)
    evaluate_image = sgeval.evaluate_image

    def failing(task):
        if task.gt.image_id == "102" and task.pred is not None:  # 102's update, not compute's scoring of it as missing
            raise error
        return evaluate_image(task)

    monkeypatch.setattr(sgeval, "evaluate_image", failing)
    raised = []  # the failure surfaces at the next update that finds it finished, or at compute
    for call in [lambda image_id=image_id: evaluator.update(image_id, **perfect_update(evaluator, image_id))
                 for image_id in ("101", "102", "103")] + [evaluator.compute]:
        try:
            call()
        except type(error) as failure:
            raised.append(failure)
    assert len(raised) == 1 and any("image 102" in note for note in raised[0].__notes__)
    state = evaluator.state_dict()  # once: the Evaluator works again, without image 102
    assert "102" not in [evaluator.gt.images[slot].image_id for slot in state["slots"].tolist()]
    monkeypatch.setattr(sgeval, "evaluate_image", evaluate_image)
    for image_id in ("102", "103"):
        if evaluator.slot_of[image_id] not in evaluator.images:
            evaluator.update(image_id, **perfect_update(evaluator, image_id))
    assert evaluator.compute()["metrics"]["R@20"] == 1.0


@pytest.mark.parametrize("folder", ["cache\0here", "\0", "a" * 5000])
def test_a_gt_cache_folder_that_cannot_be_used_is_left_alone(tmp_path, folder, caplog):
    evaluator = make_evaluator(tmp_path, gt_cache=folder)
    evaluator.update("101", **perfect_update(evaluator, "101"))
    assert evaluator.compute(missing="skip")["metrics"]["R@20"] == 1.0
    assert "not used" in caplog.text


# ----------------------------------------------------------------------------------------------
# Image ids


class StrRaises:
    def __init__(self, error):
        self.error = error

    def __str__(self):
        raise self.error


class StrNotText:
    def __str__(self):
        return 101


@pytest.mark.parametrize("image_id", [StrRaises(RuntimeError("no")), StrRaises(ValueError("x\ny")),
                                      StrRaises(RecursionError()), StrNotText()])
def test_an_image_id_whose_str_fails_is_one_clean_error(filled, image_id):
    evaluator, state = filled
    problems = checked(pytest.raises(sgeval.SGEvalError, evaluator.update, image_id,
                                     **perfect_update(evaluator, "101")).value)
    assert problems[0].startswith("Evaluator.update: the image id") and "cannot be made a string" in problems[0]
    assert pickle.dumps(evaluator.state_dict()) == pickle.dumps(state)
