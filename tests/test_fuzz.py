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
