"""Special files where a regular file is expected (issue 36): a FIFO, /dev/zero, /dev/null, a
socket or a directory given to any command that reads a file -- sgeval's config, GT, PNGs,
predictions, zero-shot and predicate-group files, the GT cache's entries and key, sgeval report's
results and --labels files, the converters' raw outputs, vocabularies, GT JSON, torch files and
recipes -- is one clean error naming the file (or, for the GT cache, an entry not used), never a
hang or a read without end. Every test runs under an alarm: a hang fails it."""

import contextlib
import json
import os
import signal
import socket
import tempfile

import pytest
from click.testing import CliRunner
from conftest import checked, perfect_case

import sgeval
import sgeval_report
from sgeval_convert import common, gtjson, recipe, torchfile, vg150

KINDS = ["fifo", "dev_zero", "dev_null", "directory", "socket"]


@pytest.fixture(autouse=True)
def alarm():
    """A test that blocks for 20 s fails (a read of a FIFO would block for ever)."""
    def expire(*_):
        raise TimeoutError("blocked on a special file")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def special(tmp_path):
    """special(kind, name) -> the path of a special file of that kind (a symlink to /dev/zero or
    /dev/null, a FIFO, a directory, a listening socket) named name in tmp_path."""
    sockets = []

    def make(kind, name="special"):
        path = tmp_path / name
        if path.exists() or path.is_symlink():
            path.unlink() if not path.is_dir() else path.rmdir()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind in ("dev_zero", "dev_null"):
            os.symlink(f"/dev/{kind[4:]}", path)
        elif kind == "directory":
            path.mkdir()
        else:  # bound in a short folder (AF_UNIX paths are short), linked here
            server = socket.socket(socket.AF_UNIX)
            server.bind(os.path.join(tempfile.mkdtemp(prefix="s"), "s"))
            sockets.append(server)
            os.symlink(server.getsockname(), path)
        return path

    yield make
    for server in sockets:
        server.close()


def refused(call, *args, kinds=(sgeval.SGEvalError,)):
    """The problem lines of the clean error call(*args) raises."""
    with pytest.raises(kinds) as info:
        call(*args)
    return checked(info.value)


# ----------------------------------------------------------------------------------------------
# sgeval report


@pytest.fixture(scope="module")
def results_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    values = perfect_case(folder)
    sgeval.evaluate(sgeval.make_config({**values, "output": str(folder / "results.json")}))
    return folder / "results.json"


def report(*args):
    return CliRunner().invoke(sgeval_report.main, [str(arg) for arg in args], catch_exceptions=False)


@pytest.mark.parametrize("kind", KINDS)
def test_report_refuses_a_special_results_file(special, kind):
    path = special(kind, "results.json")
    result = report(path)
    if kind == "directory":  # click's own usage error
        assert result.exit_code == 2 and "is a directory" in result.output
        return
    lines = result.stderr.splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith(f"error: {path}: cannot read")
    assert "not a regular file" in lines[0]


@pytest.mark.parametrize("kind", KINDS)
def test_report_refuses_a_special_labels_file(special, results_file, kind):
    path = special(kind, "labels.yaml")
    result = report(results_file, "--labels", path)
    if kind == "directory":
        assert result.exit_code == 2 and "is a directory" in result.output
        return
    lines = result.stderr.splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith(f"error: {path}: cannot read the labels")


def test_report_refuses_a_labels_file_over_its_limit(results_file, monkeypatch, tmp_path):
    monkeypatch.setattr(sgeval_report, "MAX_LABELS_BYTES", 8)
    (tmp_path / "labels.yaml").write_text("results.json: a label longer than eight bytes\n")
    size = (tmp_path / "labels.yaml").stat().st_size
    lines = report(results_file, "--labels", tmp_path / "labels.yaml").stderr.splitlines()
    assert lines == [f"error: {tmp_path / 'labels.yaml'}: cannot read the labels: {size} bytes, more than the 8 it "
                     f"may have"]


# ----------------------------------------------------------------------------------------------
# sgeval itself


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory"])
@pytest.mark.parametrize("key", ["gt", "pred", "zeroshot_triplets", "train_gt", "predicate_groups", "config"])
def test_evaluate_refuses_a_special_input(tmp_path, special, kind, key):
    values = perfect_case(tmp_path)
    path = special(kind, "input")
    if key == "config":
        problems = refused(sgeval.load_config, str(path))
    else:
        problems = refused(lambda: sgeval.evaluate(sgeval.make_config({**values, key: str(path)})))
    assert str(path) in problems[0]


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory"])
def test_a_special_panoptic_png_is_an_error_of_its_image(tmp_path, special, kind):
    values = perfect_case(tmp_path)
    png = tmp_path / "gt" / "panoptic" / "102.png"
    png.unlink()
    special(kind, "gt/panoptic/102.png")
    problems = refused(lambda: sgeval.evaluate(sgeval.make_config({**values, "gt_cache": False})))
    assert any("102" in problem and str(png) in problem for problem in problems)


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "dev_null", "directory", "socket"])
@pytest.mark.parametrize("target", ["entry", "key"])
def test_a_special_gt_cache_entry_or_key_is_not_used(tmp_path, special, kind, target):
    values = perfect_case(tmp_path)
    expected = sgeval.evaluate(sgeval.make_config({**values, "gt_cache": False}))["metrics"]
    folder = tmp_path / "cache"
    folder.mkdir()
    name = sgeval.GT_CACHE_KEY_FILE if target == "key" else "entries.gtp"  # a pack of entries
    special(kind, f"cache/{name}")
    with contextlib.suppress(sgeval.SGEvalError):  # not one: the cache is a performance feature
        assert sgeval.evaluate(sgeval.make_config({**values, "gt_cache": str(folder)}))["metrics"] == expected
    assert sgeval.evaluate(sgeval.make_config({**values, "gt_cache": str(folder)}))["metrics"] == expected


# ----------------------------------------------------------------------------------------------
# The converters


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "dev_null", "socket"])
def test_converters_refuse_special_inputs(tmp_path, special, kind):
    readers = {
        "raw pickle": lambda path: [common.load_source(source, "result") for source in common.open_raw(path).sources],
        "per-image pickle": lambda path: common.load_source(str(path), "result 0"),
        "per-image npz": lambda path: common.load_source(str(path), "result 0"),
        "vocabulary": lambda path: gtjson.read_small_json(path, "vocabulary"),
        "GT JSON": lambda path: list(gtjson.stream_list(path)),
        "torch file": lambda path: torchfile.load(path),
        "recipe": lambda path: recipe._yaml_mapping(path, "recipe"),
        "HDF5": lambda path: vg150.open_h5(path),
    }
    for what, read in readers.items():
        suffix = {"per-image npz": ".npz", "per-image pickle": ".pkl"}.get(what, "")
        path = special(kind, f"input{suffix}")
        problems = refused(read, path)
        assert str(path) in problems[0], (what, problems)
        if what != "HDF5" or "h5py" not in problems[0]:
            assert "not a regular file" in problems[0], (what, problems)


def test_a_per_image_directory_with_a_fifo_is_an_error_of_that_image(tmp_path, special):
    folder = tmp_path / "raw"
    folder.mkdir()
    special("fifo", "raw/0.npz")
    raw = common.open_raw(folder)
    problems = refused(lambda: [common.load_source(source, "result 0") for source in raw.sources])
    assert problems[0].startswith(f"{folder / '0.npz'}: cannot read")


def test_a_prediction_zip_that_is_a_fifo_is_stale(tmp_path, special):
    """convert's up-to-date check reads a prediction ZIP's provenance: a FIFO in its place is
    reported stale (converted again), not read."""
    path = special("fifo", "pred.zip")
    (tmp_path / "raw.pkl").write_bytes(b"")
    (tmp_path / "gt.json").write_text(json.dumps({}))
    os.utime(path, (4e9, 4e9))
    assert "no readable" in recipe.stale_reason(str(path), str(tmp_path / "raw.pkl"), str(tmp_path / "gt.json"),
                                                "hilo", {})
