"""The fuzz readers that run whole commands in the worker (fuzz/worker.py calls run): ``special``
(a file a command reads made a FIFO, a device, a directory or a socket: an evaluation, sgeval
report, the converters' readers), ``env`` (sgeval's environment variables set to hostile values
for an evaluation, a report or the Open Images converter) and ``report`` (a hostile results
file). Each judges its own outcome:

* special: a clean error naming the file; a special GT cache entry or key file is not used (the
  results are the base workspace's); an acceptance of any other special file is silent.
* env: a value fuzz/oracle.py's valid_env refuses must be an error naming its variable when the
  command reads it (else silent); an error naming a variable whose value is valid is refused.
* report: an acceptance must show no inf or nan, and its Markdown must show names as text
  (fuzz/oracle.py's markdown_problem)."""

import contextlib
import os
import socket
import tempfile
from pathlib import Path

import yaml

from fuzz.oracle import markdown_problem, table_number_problem, valid_env

READERS = ("special", "env", "report")
CACHE_TARGETS = ("cache/entry", "cache/sgeval.key")
ENV_READ_BY = {"evaluate": ("SGEVAL_MAX_IMAGE_PIXELS", "SGEVAL_GT_CACHE_MIB", "SGEVAL_GT_MEMORY_MIB"),
               "openimages": ("SGEVAL_MAX_IMAGE_PIXELS",), "report": ()}


def run(case, same_metrics, sgeval):
    """(outcome, detail) of a case of READERS in the current folder (a copy of the base
    workspace); same_metrics(results) says whether results are the base workspace's. A case
    without its reader's keys runs the command on the unbroken workspace."""
    argv = case.get("report_argv", ["results.json"])
    try:
        result = _RUNNERS[case["reader"]](case, sgeval)
    except sgeval.SGEvalError as error:
        return _refusal(case, error.problems)
    if case["reader"] == "special":
        if (case.get("target"), case.get("kind")) == ("raw.pkl", "directory"):  # a folder of per-image files (none)
            return "accepted", ""
        if case.get("target") not in (*CACHE_TARGETS, None):
            return "silent", f"a {case['kind']} as {case['target']} accepted by {case['command']}"
        return ("accepted", "") if same_metrics(result) else ("silent", "a special GT cache file changed the results")
    if case["reader"] == "env":
        invalid = [name for name in ENV_READ_BY[case.get("command", "evaluate")] if name in case.get("env", {})
                   and not valid_env(name, case["env"][name])]
        return ("silent", f"{case['command']} accepted {invalid[0]}={case['env'][invalid[0]]!r}") if invalid \
            else ("accepted", "")
    problem = table_number_problem(result) or (markdown_problem(result) if "latex" not in argv and "csv" not in argv
                                                else None)
    return ("silent", problem) if problem else ("accepted", "")


def _refusal(case, problems):
    first = problems[0][:300] if problems else "an error without problems"
    if case["reader"] == "special" and case.get("target") in CACHE_TARGETS:
        return "refused", f"a special GT cache file made the evaluation fail: {first}"
    if case["reader"] == "env":
        named = [name for name in case.get("env", {}) if f"environment variable {name}=" in first]
        if named and valid_env(named[0], case["env"][named[0]]):
            return "refused", f"a valid value refused: {first}"
    return "error", first


def _report(argv, sgeval):
    """sgeval report's output for argv; SGEvalError for its exit codes 1 and 2."""
    from click.testing import CliRunner

    import sgeval_report
    outcome = CliRunner().invoke(sgeval_report.main, argv)
    if outcome.exit_code in (1, 2):
        raise sgeval.SGEvalError([(outcome.output.strip().splitlines() or ["exit"])[-1]])
    if outcome.exception is not None and not isinstance(outcome.exception, SystemExit):
        raise outcome.exception
    return outcome.output


def _evaluation(sgeval, **values):
    """sgeval.evaluate of the workspace's config with values, its GT cache in ./cache."""
    config = {**yaml.safe_load(Path("config.yaml").read_bytes()), "gt_cache": "cache", **values}
    return sgeval.evaluate(sgeval.make_config(config))


# ---------------------------------------------------------------------------------------------- special


def _special_path(target, sgeval):
    """The file a special target names in the workspace."""
    if target == "gt/panoptic/png":
        return sorted(Path("gt/panoptic").rglob("*.png"))[0]
    if target == "cache/entry":
        return Path("cache", "entries.gtp")  # a pack of GT cache entries
    return Path(target)


def make_special(path, kind):
    """A FIFO, a link to /dev/zero or /dev/null, a directory or a socket at path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind in ("dev_zero", "dev_null"):
        os.symlink(f"/dev/{kind[4:]}", path)
    elif kind == "directory":
        path.mkdir(exist_ok=True)
    else:  # a socket file stays after its socket closes; bound in a short folder (AF_UNIX paths are short)
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(os.path.join(tempfile.mkdtemp(prefix="s"), "s"))
            os.symlink(server.getsockname(), path)


def _convert_readers():
    from sgeval_convert import common, gtjson, recipe, torchfile, vg150
    return {"raw.pkl": lambda path: [common.load_source(source, "result") for source in common.open_raw(path).sources],
            "raw.npz": lambda path: common.load_source(str(path), "result 0"),
            "raw.pytorch": torchfile.load, "vocabulary.json": lambda path: gtjson.read_small_json(path, "vocabulary"),
            "gt/psg.json": lambda path: list(gtjson.stream_list(path, "data")),
            "recipe.yaml": lambda path: recipe._yaml_mapping(path, "recipe"), "raw.h5": vg150.open_h5}


def _special(case, sgeval):
    target = case.get("target")
    if target is None:  # the unbroken workspace
        return _evaluation(sgeval)
    if target in CACHE_TARGETS:  # a warm cache first: the entry exists, then it is replaced
        _evaluation(sgeval)
    path = _special_path(target, sgeval)
    make_special(path, case["kind"])
    if case["command"] == "report":
        return _report(["results.json"] + (["--labels", str(path)] if target == "labels.yaml" else []), sgeval)
    if case["command"] == "convert":
        return _convert_readers()[target](path)
    if target == "config.yaml":
        return sgeval.load_config(str(path))
    keys = {"zeroshot.json": "zeroshot_triplets", "groups.yaml": "predicate_groups", "train.json": "train_gt"}
    return _evaluation(sgeval, **({keys[target]: str(path)} if target in keys else {}))


# ---------------------------------------------------------------------------------------------- env


@contextlib.contextmanager
def _environment(values):
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _Problems(list):
    def add(self, line):
        self.append(line)


def _env(case, sgeval):
    with _environment(case.get("env", {})):
        if case.get("command") == "report":
            return _report(["results.json"], sgeval)
        if case.get("command") == "openimages":
            from sgeval_convert import openimages
            problems = _Problems()
            entry = {"img_fn": "a", "img_size": [16, 12], "bbox": [[0, 0, 1, 1]], "det_labels": [0], "rel": [[0, 0, 0]]}
            return openimages.convert_entry(0, entry, 1, 1, "gt.json", problems), problems
        return _evaluation(sgeval)


_RUNNERS = {"special": _special, "env": _env,
            "report": lambda case, sgeval: _report(case.get("report_argv", ["results.json"]), sgeval)}
