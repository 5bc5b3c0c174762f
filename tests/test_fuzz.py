"""The fuzz suite's fixed slice and its corpus (fuzz/): generated bad inputs for every reader, each
run in a worker process with an address-space limit and a timeout. Every outcome must be a clean
error or an acceptance the reference decoders agree with; `make fuzz` runs the long campaign."""

from pathlib import Path

import pytest

from fuzz import __main__ as fuzz
from fuzz.cases import READERS, base_workspace

CORPUS = sorted(Path(fuzz.CORPUS).glob("*.case"))


def test_a_fixed_slice_of_every_reader_is_clean(capsys):
    """The same 300 cases per reader every time (hypothesis, derandomized): no traceback, crash,
    hang, memory blow-up or silent acceptance."""
    assert fuzz.main(["--examples", "300", "--derandomize", "--no-save"]) == 0, capsys.readouterr().out
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
