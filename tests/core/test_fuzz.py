"""The fuzz suite's fixed slice and its corpus (fuzz/): generated bad inputs for every reader, each
run in a worker process with an address-space limit and a timeout. Every outcome must be a clean
error or an acceptance the reference decoders agree with; `make fuzz` runs the long campaign."""

from pathlib import Path

import pytest

from fuzz import __main__ as fuzz
from fuzz.cases import READERS, base_workspace

CORPUS = sorted(Path(fuzz.CORPUS).glob("*.case"))


def test_a_fixed_slice_of_every_reader_is_clean(capsys):
    """The same 100 cases per reader every time (hypothesis, derandomized): no traceback, crash,
    hang, memory blow-up or silent acceptance."""
    assert fuzz.main(["--examples", "100", "--derandomize", "--no-save"]) == 0, capsys.readouterr().out
    report = capsys.readouterr().out
    assert all(reader in report for reader in READERS)


def test_the_unbroken_workspace_is_accepted_by_every_reader():
    base = base_workspace()
    worker = fuzz.Worker(base)
    members = {"tiff": "101.tiff", "png": next(name for name in sorted(base) if name.endswith("101.png"))}
    try:
        argv = ["--gt", "gt/psg.json", "--gt-seg", "gt/panoptic", "--pred", "pred.zip", "--quiet"]
        outcomes = {reader: worker.run({"reader": reader, "files": {}, "argv": argv, "member": members.get(reader)})
                    for reader in READERS}
    finally:
        worker.stop()
    assert all(kind == "accepted" for kind, _ in outcomes.values()), outcomes


@pytest.mark.parametrize("path", CORPUS, ids=[path.name for path in CORPUS])
def test_corpus_case_is_clean(path):
    """Every case a campaign once found (saved by `make fuzz`), replayed."""
    import pickle
    worker = fuzz.Worker(base_workspace())
    try:
        outcome, detail = worker.run(pickle.loads(path.read_bytes()))
    finally:
        worker.stop()
    assert outcome in fuzz.CLEAN, detail


def test_the_reference_validator_of_triplets_json():
    """fuzz/oracle.py on the base prediction and on one break of each rule it checks."""
    import io
    import json
    import zipfile

    from fuzz.oracle import valid_prediction
    with zipfile.ZipFile(io.BytesIO(base_workspace()["pred.zip"])) as archive:
        document, members = json.loads(archive.read("triplets.json")), set(archive.namelist())
    counts = {"101.tiff": 3, "102.tiff": 2, "103.tiff": 2}

    def valid(edit=None):
        copy = json.loads(json.dumps(document))
        if edit:
            edit(copy)
        return valid_prediction(copy, 5, 3, members, {"101", "102", "103"}, counts)

    first = lambda doc: doc["images"][0]  # noqa: E731
    assert valid() and valid(lambda doc: first(doc).update(ng_triplets=None, id=101))
    assert valid(lambda doc: first(doc)["instances"][0].pop("bbox")) and valid(lambda doc: doc.update(extra=1))
    breaks = [lambda doc: doc.update(version=True), lambda doc: first(doc).update(triplets=[[0, True, 0]]),
              lambda doc: first(doc).update(triplets=[[]]), lambda doc: first(doc).update(triplets=None),
              lambda doc: first(doc).update(triplets=[[0, 3, 0]]), lambda doc: first(doc).update(id=True),
              lambda doc: first(doc)["instances"][0].update(category=1.0),
              lambda doc: first(doc)["instances"][0].update(bbox=[0, 0, 1, 1, 1]),
              lambda doc: first(doc)["instances"][0].update(score=float("nan")),
              lambda doc: first(doc)["instances"].pop(), lambda doc: first(doc).update(seg_filename="x.tiff"),
              lambda doc: doc["images"].append(dict(first(doc)))]
    assert not any(valid(edit) for edit in breaks)


def test_the_reference_validator_of_psg_json():
    """fuzz/oracle.py's psg.json rules on the base GT and on one break of each."""
    import json

    from fuzz import worker
    from fuzz.cases import EVALUATED
    from fuzz.oracle import valid_gt
    base = base_workspace()
    document = json.loads(base["gt/psg.json"])
    pngs = worker._png_segments(tuple(sorted((k, v) for k, v in base.items() if k.endswith(".png"))))

    def valid(edit=None):
        copy = json.loads(json.dumps(document))
        if edit:
            edit(copy)
        return valid_gt(copy, pngs, set(EVALUATED), 1 << 26)

    entry = lambda doc, index=0: doc["data"][index]  # noqa: E731
    assert valid() and valid(lambda doc: entry(doc).update(extra=1))
    assert valid(lambda doc: entry(doc, 3).pop("annotations"))  # a training entry needs segments and relations only
    breaks = [lambda doc: doc.pop("stuff_classes"), lambda doc: doc["predicate_classes"].append("on"),
              lambda doc: entry(doc).update(height=True), lambda doc: entry(doc).update(width=0),
              lambda doc: entry(doc).update(relations=[[]]), lambda doc: entry(doc).update(relations=None),
              lambda doc: entry(doc)["relations"].append([0, 9, 0]),
              lambda doc: entry(doc)["segments_info"][0].update(category_id=1.0),
              lambda doc: entry(doc)["annotations"][0].update(bbox=[0, 0, 1, float("nan")]),
              lambda doc: entry(doc)["annotations"].pop(),
              lambda doc: entry(doc)["segments_info"][1].update(id=entry(doc)["segments_info"][0]["id"]),
              lambda doc: entry(doc)["segments_info"][0].update(id=123456),
              lambda doc: entry(doc).update(pan_seg_file_name="none.png"),
              lambda doc: entry(doc).update(height=10**5, width=10**5),
              lambda doc: entry(doc, 3)["relations"].append([0, 1, 7]),
              lambda doc: doc["data"].append(dict(entry(doc))), lambda doc: doc["test_image_ids"].append("999")]
    assert not any(valid(edit) for edit in breaks)


def test_the_reference_validator_of_configs(tmp_path, monkeypatch):
    """fuzz/oracle.py's config rules (YAML values or command-line options) in a workspace."""
    import sgeval
    from fuzz.oracle import valid_config
    monkeypatch.chdir(tmp_path)
    for name in ("gt/psg.json", "pred.zip", "gt/panoptic/x.png"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    fields = [field.name for field in sgeval.dataclasses.fields(sgeval.Config)]
    base = {"gt": "gt/psg.json", "gt_seg": "gt/panoptic", "pred": "pred.zip", "k": [1, 20, "x1"], "workers": 1}
    verdict = lambda **edit: valid_config({**base, **edit}, fields)  # noqa: E731
    assert verdict() == (True, True) and verdict(k="20, x.5", workers=" 2 ", gt_seg=None) == (True, True)
    assert verdict(output="r.json") == (True, False) and verdict(train_gt="gt/psg.json") == (True, False)
    for edit in [{"k": ["\u0663"]}, {"k": "1_0"}, {"k": "x1e400"}, {"k": []}, {"imr_k": "x10"}, {"workers": 65},
                 {"workers": True}, {"workers": "\u00b2"}, {"iou_threshold": 0}, {"protocol": "UNIQUE"},
                 {"metrics": ["R", "bogus"]}, {"audit": "yes"}, {"kk": 1}, {"gt": ""}, {"pred": "none.zip"},
                 {"gt_seg": "none"}, {"k": {"a": 1}}, {"train_gt": "none.json"}]:
        assert verdict(**edit) == (False, True), edit


def test_the_reference_validator_of_updates():
    """fuzz/oracle.py's Evaluator.update rules on the base prediction of an image, in other valid
    forms, and on one break of each rule."""
    import numpy as np

    import sgeval
    from fuzz.cases import EVALUATED, EXTRA, HEIGHT, WIDTH, Tensor, base_update
    from fuzz.oracle import valid_update

    def verdict(image_id="102", mode="mask", prior=(), **edit):
        arguments = {**base_update("102"), **edit}
        return valid_update(image_id, arguments, mode, {i: (HEIGHT, WIDTH) for i in (*EVALUATED, EXTRA)}, {EXTRA}, 5, 3,
                            sgeval.MAX_INSTANCES, prior)

    masks, labels = base_update("102")["masks"], base_update("102")["labels"]
    segment_map = np.where(masks[0], 7, 9)
    for valid in [{}, {"image_id": 102}, {"image_id": EXTRA}, {"labels": labels.tolist()}, {"labels": Tensor(labels)},
                  {"masks": masks.astype(np.uint8)}, {"masks": sgeval.Panoptic(segment_map, [7, 9])},
                  {"masks": (segment_map, np.array([7, 9]))}, {"masks": sgeval.Panoptic(segment_map, [7, 5])},
                  {"ng_triplets": None, "boxes": None, "scores": None}, {"triplets": np.zeros((0,))},
                  {"mode": "box", "masks": "ignored"}, {"boxes": [[3, 0, 1, 12]] * 2},
                  {"labels": [], "triplets": [], "ng_triplets": None, "boxes": None, "scores": None, "masks": None},
                  {"prior": [("102", base_update("102"))]}]:
        assert verdict(**valid) == (True, True), valid
    for invalid in [{"image_id": "900"}, {"image_id": "0"}, {"labels": labels.astype(float)}, {"labels": [0, 5]},
                    {"labels": [True, False]}, {"labels": labels.astype(np.uint64) + 2 ** 63}, {"triplets": None},
                    {"triplets": [[0, 2, 0]]}, {"triplets": [[0, 1]]}, {"ng_triplets": [[0, 1, 3]]},
                    {"masks": None}, {"masks": masks.astype(float)}, {"masks": masks[:, :, :-1]}, {"masks": masks[:1]},
                    {"masks": masks.astype(int) * 2}, {"masks": sgeval.Panoptic(segment_map, [7, 7])},
                    {"masks": sgeval.Panoptic(segment_map[:-1], [7, 9])},
                    {"masks": sgeval.Panoptic(segment_map * 1.0, [7, 9])}, {"boxes": [[0, 0, 1, float("nan")]] * 2},
                    {"boxes": [[0, 0, 1, 1]]}, {"scores": [0.5, float("inf")]}, {"scores": [True, False]},
                    {"mode": "box", "boxes": None}, {"mode": "box", "boxes": [[3, 0, 1, 12]] * 2},
                    {"labels": Tensor(labels, RuntimeError("cuda"))}, {"labels": [], "triplets": []},
                    {"labels": np.zeros(sgeval.MAX_INSTANCES + 1, int), "triplets": []},
                    {"prior": [("102", {**base_update("102"), "triplets": [[1, 0, 2]]})]}]:
        assert verdict(**invalid) == (False, True), invalid


def test_the_reference_reader_of_states():
    """fuzz/oracle.py's state rules on the valid states, a merge, and one break of each rule."""
    import numpy as np

    from fuzz.cases import EVALUATED, EXTRA, evaluator_states
    from fuzz.oracle import merged_state, read_state
    states = evaluator_states(base_workspace())
    full = states["full"]
    known = {}
    for name in ("one", "full"):
        offsets = states[name]["offsets"].tolist()
        for slot, start, stop in zip(states[name]["slots"].tolist(), offsets, offsets[1:]):
            known.setdefault(slot, set()).add(tuple(states[name]["values"][start:stop].tolist()))

    def read(edit=None, state=full):
        return read_state({**state, **(edit or {})}, full["fingerprint"], len(EVALUATED), {EXTRA}, known)

    assert all(read(state=states[name])[:2] == (True, True) for name in ("empty", "one", "full"))
    assert read({"extra_ids": [int(EXTRA)]})[:2] == (True, True)
    merged = merged_state(read(), read(state=states["one"])[2])
    assert merged[:2] == (True, True) and merged[2][0][1][1] == 4  # image 102: updated 3 + 1 times
    assert read({"updates": full["updates"].astype(float)})[0] is False
    values = full["values"].astype(np.int64)
    values[3] = -1
    offsets = full["offsets"].copy()
    offsets[1] = offsets[2]
    for edit in [{"fingerprint": full["fingerprint"][:-1]}, {"sgeval_state": 2}, {"slots": full["slots"][::-1] * 0},
                 {"slots": full["slots"] + 1}, {"updates": full["updates"] * 0}, {"digests": full["digests"][:, :15]},
                 {"offsets": offsets}, {"values": full["values"][:-1]}, {"values": values},
                 {"extra_ids": ["101"]},
                 {"extra_ids": ["104", 104], "extra_updates": [1, 1], "extra_digests": [[0] * 16] * 2},
                 {"extra_updates": [1.5]}, {"extra_digests": [[7] * 15]}, {"other_records": -1}, {"other_records": 1.5},
                 {"other_records": True}]:
        assert read(edit)[:2] == (False, True), edit
    assert read(state=states["box"])[:2] == (False, True)
    assert read_state(list(full.items()), full["fingerprint"], len(EVALUATED), {EXTRA}, known)[:2] == (False, True)
    assert merged_state(read(), ({1: (b"x" * 16, 1, ())}, {}, 0))[:2] == (False, True)  # another digest of 102
