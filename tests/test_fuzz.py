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
