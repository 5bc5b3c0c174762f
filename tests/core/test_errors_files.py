"""Paths that are not regular files (a device, a FIFO, a directory given as a file) and floods of
bad records: one clear line each, never a hang, a MemoryError or an unbounded list of problems."""

import json
import os
import threading

import numpy as np
import pytest
from conftest import checked, only, perfect_case, sgeval


def _fifo(tmp_path, name="pipe"):
    """A FIFO nobody writes to: opening it for reading would block for ever."""
    path = tmp_path / name
    os.mkfifo(path)
    return path


def _refused_within(seconds, call):
    """The problems of the SGEvalError call() raises, which it must raise within seconds."""
    outcome = {}

    def run():
        try:
            call()
        except sgeval.SGEvalError as error:
            outcome["problems"] = checked(error)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "it blocked"
    return outcome["problems"]


@pytest.mark.parametrize("key, kind", [(key, kind) for key in ("gt", "train_gt", "zeroshot_triplets", "predicate_groups",
                                                                 "pred") for kind in ("device", "fifo", "directory")
                                       if (key, kind) != ("pred", "directory")])  # a prediction folder is one
def test_a_path_that_is_not_a_regular_file_is_refused(tmp_path, key, kind):
    """/dev/zero (endless), a FIFO (blocks) or a directory where a file is read: one line naming
    the path."""
    values = perfect_case(tmp_path)
    path = {"device": "/dev/zero", "fifo": str(_fifo(tmp_path)), "directory": str(tmp_path / "gt")}[kind]
    problems = _refused_within(30, lambda: sgeval.evaluate(sgeval.make_config({**values, key: path})))
    words = ("a directory",) if kind == "directory" else ("not a regular file",)
    only(problems, path, None, *words)


@pytest.mark.parametrize("kind", ["device", "fifo", "directory"])
def test_a_yaml_config_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    path = {"device": "/dev/zero", "fifo": str(_fifo(tmp_path)), "directory": str(tmp_path)}[kind]
    only(_refused_within(30, lambda: sgeval.load_config(path)), path, None, "YAML config")


def test_a_fifo_inside_a_prediction_folder_is_a_problem_not_a_hang(tmp_path):
    """A prediction folder whose mask file is a FIFO: the image's problem, at once."""
    values = perfect_case(tmp_path)
    folder = tmp_path / "pred-dir"
    sgeval.write_predictions(folder, [{"id": "101", "instances": [{"category": 0, "bbox": [0, 0, 1, 1]}],
                                       "triplets": [], "masks": np.zeros((1, 2, 8), bool)}],
                             kind="dir")
    os.remove(folder / "101.tiff")
    _fifo(folder, "101.tiff")
    problems = _refused_within(30, lambda: sgeval.evaluate(sgeval.make_config({**values, "pred": str(folder)})))
    only(problems, folder, "101", "not a regular file")


def test_a_flood_of_bad_records_keeps_the_first_problems_and_counts_the_rest(tmp_path):
    """5,000 records with a float id: the first MAX_PROBLEMS lines, then one line counting the
    others (the problems kept do not grow with the file)."""
    values = perfect_case(tmp_path, "box")
    bad = 5000
    records = [{"id": 1.5, "instances": [], "triplets": []}] * bad
    (tmp_path / "flood.json").write_text(json.dumps({"version": 1, "images": records}))
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.evaluate(sgeval.make_config({**values, "pred": str(tmp_path / "flood.json")}))
    problems = checked(info.value)
    assert len(problems) == sgeval.MAX_PROBLEMS + 1
    assert all("field 'id'" in problem for problem in problems[:-1])
    assert problems[-1] == f"... and {bad - sgeval.MAX_PROBLEMS} more problems (the first {sgeval.MAX_PROBLEMS} are listed)"


def test_the_problem_list_counts_what_it_does_not_keep():
    """ProblemList keeps MAX_PROBLEMS lines; len() counts all (readers compare it before and
    after a check); SGEvalError of a plain list is capped the same way."""
    problems = sgeval.ProblemList()
    problems += [f"line {i}" for i in range(sgeval.MAX_PROBLEMS + 5)]
    problems.append("one more")
    assert len(problems) == sgeval.MAX_PROBLEMS + 6 and list.__len__(problems) == sgeval.MAX_PROBLEMS
    assert sgeval.SGEvalError(problems).problems[-1].startswith("... and 6 more problems")
    assert len(sgeval.SGEvalError([f"p{i}" for i in range(1500)]).problems) == sgeval.MAX_PROBLEMS + 1
