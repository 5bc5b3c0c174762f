"""The fuzz worker: a child process that runs cases one at a time under an address-space limit and
says what happened. Protocol: pickled case in, pickled outcome out, each prefixed by its length
(4 bytes, big-endian) on stdin / stdout. ``python -m fuzz.worker``.

Outcomes: ``error`` (one clean error: SGEvalError, ConvertError, exit code 1 or 2 of the CLI),
``accepted`` (results, and the reference decoder or validator agrees), ``traceback`` (any other
exception), ``memory`` (MemoryError under the limit), ``silent`` (accepted, but the reference says
the input is invalid or decodes it differently), ``refused`` (an error for input the reference
finds valid), ``dirty`` (the Evaluator's SGEvalError changed its state, or its problems are not one
line each naming the image). The parent adds ``crash`` and ``hang``.

The references, per reader: fuzz/oracle.py's validators (written from the documented rules) for
triplets.json, psg.json, YAML configs and command lines; tifffile for TIFFs; PIL for PNGs; the
zipfile module and the unbroken workspace's results for ZIP structure; numpy's own .npz reader;
the pickle module with numpy's own reconstructors (in a forked child, as they trust their input)
for pickles; for torch.save files (no reference without torch) the lazy and the eager load agree;
for the Evaluator's updates and states fuzz/oracle.py's validators, and after an acceptance the
state it holds (the update counted; a valid state as given, or merged) and compute(); a state with
an impossible record (cases.impossible_record) must be refused; the special, env and report
readers are judged by fuzz/commands.py."""

import contextlib
import copy
import functools
import io
import json
import os
import pickle
import re
import resource
import shutil
import signal
import struct
import sys
import tempfile
import traceback
import zipfile
from pathlib import Path

import numpy as np

from fuzz import commands
from fuzz.cases import (EVALUATED, EXTRA, HEIGHT, IMPOSSIBLE_LIMITS, PREDICATES, STUFF, THINGS, WIDTH, Big,
                        base_update, evaluator_files, evaluator_states, make_evaluator)
from fuzz.oracle import merged_state, read_state, valid_config, valid_gt, valid_prediction, valid_update

ADDRESS_SPACE = 3 << 30
EVALUATOR_READERS = ("update", "state")


def run_case(case, base, folder):
    """The outcome (kind, detail) of one case in a fresh copy of the base workspace."""
    import sgeval
    from sgeval_convert import common
    work = Path(tempfile.mkdtemp(dir=folder))
    evaluator = case["reader"] in EVALUATOR_READERS
    try:
        for name, data in {**(evaluator_files(base) if evaluator else base), **case["files"]}.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_bytes(data)
        with contextlib.chdir(work):
            if evaluator:
                return _evaluator_case(case, base, sgeval)
            if case["reader"] in commands.READERS:
                return _command_case(case, base, sgeval)
            try:
                result = _target(case, sgeval, common)
            except (sgeval.SGEvalError, common.ConvertError) as error:
                valid, sure = _reference_verdict(case, base, sgeval)
                if valid and sure:
                    return "refused", "valid by the reference: " + error.problems[0][:300]
                return "error", error.problems[0][:300]
            except MemoryError:
                return "memory", traceback.format_exc(limit=-3)[-600:]
            except Exception:  # noqa: BLE001 -- every other exception is what this run looks for
                return "traceback", traceback.format_exc(limit=-3)[-1200:]
            try:
                return _oracle(case, base, sgeval, result)
            except MemoryError:
                return "memory", "in the reference decoder"
            except Exception:  # noqa: BLE001 -- sgeval accepted what its own readers then fail on
                return "traceback", "after acceptance: " + traceback.format_exc(limit=-3)[-1200:]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _command_case(case, base, sgeval):
    """fuzz/commands.py's outcome of a case (a MemoryError or any other exception: its own)."""
    def same_metrics(results):
        return _metrics(results) == _metrics(_base_results(tuple(sorted(base.items())), sgeval))

    try:
        return commands.run(case, same_metrics, sgeval)
    except MemoryError:
        return "memory", traceback.format_exc(limit=-3)[-600:]
    except Exception:  # noqa: BLE001 -- every other exception is what this run looks for
        return "traceback", traceback.format_exc(limit=-3)[-1200:]


def _target(case, sgeval, common):
    reader = case["reader"]
    if reader == "cli":
        from click.testing import CliRunner
        outcome = CliRunner().invoke(sgeval.main, case["argv"])
        if outcome.exit_code in (1, 2):
            raise sgeval.SGEvalError([outcome.output.strip().splitlines()[-1] if outcome.output.strip() else "exit"])
        if outcome.exception is not None and not isinstance(outcome.exception, SystemExit):
            raise outcome.exception
        return outcome.output
    if reader in ("pickle", "crafted_pickle"):  # as a conversion reads it: streamed, arrays left in the file
        from sgeval_convert import unpickler
        unpickler.LAZY_BYTES = 64  # (the base pickle's arrays are small) and read by load_source
        return [common.load_source(source, f"result {index}")
                for index, source in enumerate(common.open_raw("raw.pkl").sources)]
    if reader == "torchfile":  # as sgeval_convert/sgb.py reads it: lazily, then every tensor; and eagerly
        from sgeval_convert import torchfile
        return (torchfile.read_lazy(torchfile.load("raw.pytorch", lazy=True), "raw.pytorch"),
                torchfile.load("raw.pytorch"))
    if reader == "npz":
        result = common.load_npz("raw.npz")
        for name in result.fields:
            common.field(result, name, "raw.npz", required=False)
        return result
    return sgeval.evaluate(sgeval.load_config("config.yaml"))


_EVALUATORS = {}  # mode -> a pickled Evaluator of the base config, made once per worker


def _evaluator(base, mode):
    """A fresh Evaluator in mask or box mode: a copy of one made in the first case's folder (its GT
    paths are relative: it reads the PNGs of the current case's folder, a copy of the same)."""
    if mode not in _EVALUATORS:
        evaluator = make_evaluator(base, mode)
        evaluator.fingerprint()  # reads the GT file now
        _EVALUATORS[mode] = pickle.dumps(evaluator)
    return pickle.loads(_EVALUATORS[mode])


def _evaluator_case(case, base, sgeval):
    """The outcome of an Evaluator reader's case (the current folder holds the evaluator files)."""
    try:
        return (_update_case if case["reader"] == "update" else _state_case)(case, base, sgeval)
    except MemoryError:
        return "memory", traceback.format_exc(limit=-3)[-600:]
    except Exception:  # noqa: BLE001 -- every other exception is what this run looks for
        return "traceback", traceback.format_exc(limit=-3)[-1200:]


def _update_case(case, base, sgeval):
    """Evaluator.update with the case's arguments after its prior (valid) updates: a clean error
    leaves the state as it was, an acceptance counts the update and computes."""
    mode, image_id = case.get("mode", "mask"), case.get("image_id", EVALUATED[0])
    arguments = case["arguments"] if "arguments" in case else base_update(EVALUATED[0])
    evaluator = _evaluator(base, mode)
    for prior_id, prior_arguments in case.get("prior", []):
        try:
            evaluator.update(prior_id, **prior_arguments)
        except sgeval.SGEvalError as error:
            return "refused", f"the prior valid update of image {prior_id}: {error.problems[0][:300]}"
    before = evaluator.state_dict()

    def verdict():
        return valid_update(image_id, arguments, mode, {i: (HEIGHT, WIDTH) for i in (*EVALUATED, EXTRA)}, {EXTRA},
                            len(THINGS + STUFF), len(PREDICATES), sgeval.MAX_INSTANCES, case.get("prior", []))

    try:
        evaluator.update(image_id, **arguments)
    except sgeval.SGEvalError as error:
        return _refusal(error, evaluator, before, str(image_id), verdict)
    valid, sure = verdict()
    if sure and not valid:
        return "silent", f"invalid by fuzz/oracle.py, accepted: update({image_id!r}, {_describe(arguments)})"
    slot = evaluator.slot_of.get(str(image_id))
    key = ("extra", str(image_id)) if slot is None else ("slot", slot)
    expected = _update_counts(before)
    expected[key] = expected.get(key, 0) + 1
    return _after_acceptance(evaluator, base, mode, lambda state: _update_counts(state) == expected,
                             "the update counted once", "skip" if case.get("prior") else "empty")


def _update_counts(state):
    """{("slot", slot) or ("extra", image id): update count} of a state_dict."""
    extra = zip(state["extra_ids"], np.asarray(state["extra_updates"]).tolist())
    return {**{("slot", slot): count for slot, count in zip(state["slots"].tolist(), state["updates"].tolist())},
            **{("extra", str(image_id)): count for image_id, count in extra}}


def _describe(arguments):
    """Update arguments in a few words: the dtype and shape of arrays, the type of anything else."""
    def one(value):
        if isinstance(value, np.ndarray):
            return f"{value.dtype}{list(value.shape)}"
        if isinstance(value, (tuple, list)) and len(value) < 4:
            return f"{type(value).__name__}({', '.join(map(one, value))})"
        return type(value).__name__
    return ", ".join(f"{name}={one(value)}" for name, value in arguments.items())


_ESCAPABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # what a problem may show escaped: controls, line breaks


def _refusal(error, evaluator, before, image_id, verdict):
    """error, or refused when the reference finds the input valid, or dirty when the problems
    are not one line each (naming image_id when given) or the state changed."""
    problems = error.problems
    if not isinstance(problems, list) or not problems:
        return "dirty", f"SGEvalError without problems: {problems!r:.300}"
    for problem in problems:
        if not isinstance(problem, str) or not problem.strip() or len(problem.splitlines()) != 1:
            return "dirty", f"a problem is not one line: {problem!r:.300}"
        if image_id is not None and not all(part in problem for part in _ESCAPABLE.split(image_id)):
            return "dirty", f"a problem does not name image {image_id!r}: {problem!r:.300}"
    if pickle.dumps(evaluator.state_dict()) != pickle.dumps(before):
        return "dirty", f"the state changed: {problems[0][:300]}"
    valid, sure = verdict()
    if valid and sure:
        return "refused", f"valid by fuzz/oracle.py: {problems[0][:300]}"
    return "error", problems[0][:300]


def _after_acceptance(evaluator, base, mode, holds, what, missing="empty"):
    """accepted when compute(missing) works, the state loads back into a fresh Evaluator as itself
    and holds(state_dict()); else traceback or silent."""
    try:
        if "metrics" not in evaluator.compute(missing=missing):
            return "silent", f"compute(missing={missing!r}) has no metrics"
        state = evaluator.state_dict()
        fresh = _evaluator(base, mode)
        fresh.load_state_dict(state)
        same = pickle.dumps(fresh.state_dict()) == pickle.dumps(state)
    except MemoryError:
        return "memory", "after acceptance: " + traceback.format_exc(limit=-3)[-600:]
    except Exception:  # noqa: BLE001 -- the Evaluator accepted what it then fails on
        return "traceback", "after acceptance: " + traceback.format_exc(limit=-3)[-1200:]
    if not same:
        return "silent", "accepted, but its state_dict() does not load back as itself"
    return ("accepted", "") if holds(state) else ("silent", f"accepted, but the state is not {what}")


def _state_case(case, base, sgeval):
    """load_state_dict and merge of the case's state into an Evaluator holding its prior state (a
    valid one, or none): a clean error leaves the state as it was, an acceptance holds the state
    given (or the merge) when the reference reads it as valid, and computes."""
    mode, states = case.get("mode", "mask"), evaluator_states(base)
    given = case["state"] if "state" in case else states["full"]
    if isinstance(given, dict):
        given = {key: value.array() if isinstance(value, Big) else value for key, value in given.items()}
    impossible = "impossible" in case and _make_impossible(given, case["impossible"],
                                                           _evaluator(base, mode).settings, sgeval)
    big = isinstance(case.get("state"), dict) and any(isinstance(value, Big) for value in case["state"].values())
    same_mode = {name: state for name, state in states.items() if (name == "box") == (mode == "box")}
    known = {}  # slot -> the records of the valid states
    for state in same_mode.values():
        offsets = state["offsets"].tolist()
        for slot, start, stop in zip(state["slots"].tolist(), offsets, offsets[1:]):
            known.setdefault(slot, set()).add(tuple(state["values"][start:stop].tolist()))

    def read(state):
        return read_state(state, next(iter(same_mode.values()))["fingerprint"], len(EVALUATED), {EXTRA}, known)

    prior = states[case["prior"]] if case.get("prior") else None
    outcomes = []
    for method in ("load_state_dict", "merge"):
        evaluator = _evaluator(base, mode)
        if prior is not None:
            evaluator.load_state_dict(copy.deepcopy(prior))
        expected = read(given) if method == "load_state_dict" else \
            merged_state(read(given), read(prior)[2] if prior is not None else ({}, {}, 0))
        before, given_before = evaluator.state_dict(), None if big else pickle.dumps(given)
        try:
            getattr(evaluator, method)(given)
        except sgeval.SGEvalError as error:
            outcome = _refusal(error, evaluator, before, None, lambda: expected[:2])
        else:
            valid, sure, content = expected
            outcome = ("silent", f"an impossible record accepted: {case['impossible']}") if impossible else \
                ("silent", f"invalid by fuzz/oracle.py ({content}), accepted") if sure and not valid else \
                _after_acceptance(evaluator, base, mode, lambda state: not sure or read(state)[2] == content,
                                  "the given state" if method == "load_state_dict" else "the merge",
                                  "skip" if method == "load_state_dict" else "empty")
        if not big and pickle.dumps(given) != given_before:
            outcome = "dirty", "it changed the state it was given"
        outcomes.append((method, outcome))
    for method, (kind, detail) in outcomes:
        if kind not in ("error", "accepted"):
            return kind, f"{method}: {detail}"
    return next((kind, f"{method}: {detail}") for method, (kind, detail) in outcomes
                if kind == "error" or method == "merge")


def _make_impossible(state, spec, settings, sgeval):
    """One record of a valid state (changed in place) made impossible as cases.impossible_record's
    spec says, its layout kept (found with sgeval's unpack_record); whether there was one."""
    offsets = np.asarray(state["offsets"]).tolist()
    if len(offsets) < 2:
        return False
    at = spec["record"] % (len(offsets) - 1)
    start, stop = offsets[at], offsets[at + 1]
    columns, blocks, _, _ = sgeval.unpack_record(state["values"][start:stop], settings)
    protocol = settings.protocols[spec["protocol"] % len(settings.protocols)]
    fields = blocks[protocol]  # {field: array view} (the unit's count fields)
    view, how = fields[spec["field"]], spec["how"]
    position = spec["position"] % max(view.size, 1)
    if how == "beyond":
        view.flat[position] = np.broadcast_to(fields[IMPOSSIBLE_LIMITS[spec["field"]]], view.shape).flat[position] \
            + spec["by"]
    elif how == "decrease":  # k = 1 finds more than k = 20 (or more than the GT holds)
        low, high = (view[settings.k.index(k):settings.k.index(k) + 1] for k in ("1", "20"))  # views
        column = position % max(low.size, 1)
        high.flat[column], low.flat[column] = 0, max(low.flat[column], 1)
    else:
        view.flat[position] = view.flat[position] + spec["by"] if how == "gt" else 2 ** 62
    record = columns.base  # the int64 copy the views belong to
    values = np.asarray(state["values"]).astype(np.int64)
    state["values"] = np.concatenate([values[:start], record, values[stop:]])
    return True


@functools.lru_cache(maxsize=1)
def _mask_counts(base_zip):
    """{TIFF name: number of masks} of the base prediction ZIP (decoded once per worker)."""
    import tifffile
    with zipfile.ZipFile(io.BytesIO(base_zip)) as archive:
        return {name: len(tifffile.imread(io.BytesIO(archive.read(name))).reshape(-1, HEIGHT, WIDTH))
                for name in archive.namelist() if name.endswith(".tiff")}


def _valid_prediction(base_zip):
    """fuzz/oracle.py's verdict on the case's triplets.json (the current folder holds the case)."""
    try:
        document, members = _triplets_and_members("pred.zip")
    except (ValueError, RecursionError):
        return False
    return valid_prediction(document, len(THINGS + STUFF), len(PREDICATES), members, set(EVALUATED),
                            _mask_counts(base_zip))


def _reference_verdict(case, base, sgeval):
    """(valid, sure): whether the reference finds the case's input valid, and whether it can say."""
    reader = case["reader"]
    if reader == "pred_json":
        return _valid_prediction(base["pred.zip"]), True
    if reader == "gt_json":
        return _valid_gt(base, sgeval), True
    if reader == "yaml":
        return _valid_yaml(sgeval)
    if reader == "cli":
        return _valid_argv(case["argv"], sgeval)
    if reader == "zip":
        return _same_members(base), True
    if reader == "npz":
        arrays = _npz_reference()
        return arrays is not None and _same_arrays(arrays, _npz_reference(base["raw.npz"])), True
    return False, False  # pickles: an odd field numpy ignores may be refused (the loader is stricter)


def _oracle(case, base, sgeval, result):
    """accepted, or silent when a reference decoder or validator reads the input differently."""
    reader = case["reader"]
    if reader == "tiff":
        return _same_masks_as_tifffile(case, sgeval)
    if reader == "png":
        return _same_segments_as_pil(case, sgeval)
    if reader == "zip":
        if not _same_members(base):
            return "silent", "accepted, but the zipfile module reads other members than the unbroken ZIP's"
        same = _metrics(result) == _metrics(_base_results(tuple(sorted(base.items())), sgeval))
        return ("accepted", "") if same else ("silent", "the same members give other metrics")
    if reader == "npz":
        reference = _npz_reference()
        return ("accepted", "") if reference is not None and _same_arrays(result.fields, reference) else \
            ("silent", "numpy's .npz reader reads other arrays")
    if reader == "torchfile":  # no reference without torch: the lazy and the eager reading must agree
        return ("accepted", "") if _same(*result) else ("silent", "lazy and eager loads read other values")
    if reader in ("pickle", "crafted_pickle"):
        reference = _pickle_reference("raw.pkl")
        return ("accepted", "") if _same_results([r.fields for r in result], reference) else \
            ("silent", f"the pickle module with numpy reads {str(reference)[:200]}")
    valid, sure = _reference_verdict(case, base, sgeval)
    return ("silent", "invalid by fuzz/oracle.py, accepted by sgeval") if sure and not valid else ("accepted", "")


def _metrics(results):
    """The metrics of a results dict as comparable text (NaN-safe)."""
    return json.dumps({key: results[key] for key in ("metrics", "images", "protocol_audit")}, sort_keys=True)


@functools.lru_cache(maxsize=1)
def _base_results(base_items, sgeval):
    with tempfile.TemporaryDirectory() as folder, contextlib.chdir(folder):
        for name, data in base_items:
            Path(name).parent.mkdir(parents=True, exist_ok=True)
            Path(name).write_bytes(data)
        return sgeval.evaluate(sgeval.load_config("config.yaml"))


def _same_members(base):
    """Whether the zipfile module reads the case's pred.zip (CRCs checked) as the unbroken ZIP's
    members, names and bytes."""
    try:
        with zipfile.ZipFile("pred.zip") as archive:
            names = archive.namelist()
            members = {name: archive.read(name) for name in names}
        with zipfile.ZipFile(io.BytesIO(base["pred.zip"])) as archive:
            expected = {name: archive.read(name) for name in archive.namelist()}
    except Exception:  # noqa: BLE001 -- any failure of the reference: it cannot read the file
        return False
    return len(names) == len(set(names)) and members == expected


def _valid_gt(base, sgeval):
    try:
        document = json.loads(Path("gt/psg.json").read_bytes())
    except (ValueError, RecursionError):
        return False
    if not valid_gt(document, _png_segments(tuple(sorted((k, v) for k, v in base.items() if k.endswith(".png")))),
                    set(EVALUATED), sgeval.MAX_IMAGE_PIXELS):
        return False
    prediction, members = _unbroken_prediction(base["pred.zip"])  # judged in the new vocabulary
    objects = document["thing_classes"] + document["stuff_classes"]
    return valid_prediction(prediction, len(objects), len(document["predicate_classes"]), members, set(EVALUATED),
                            _mask_counts(base["pred.zip"]))


def _triplets_and_members(zip_file):
    """(triplets.json parsed, member names) of a prediction ZIP."""
    with zipfile.ZipFile(zip_file) as archive:
        return json.loads(archive.read("triplets.json")), set(archive.namelist())


@functools.lru_cache(maxsize=1)
def _unbroken_prediction(base_zip):
    """_triplets_and_members of the unbroken prediction ZIP (read once per worker)."""
    return _triplets_and_members(io.BytesIO(base_zip))


@functools.lru_cache(maxsize=1)
def _png_segments(pngs):
    """{name under gt/panoptic: (set of segment ids, (height, width))} of the unbroken PNGs (PIL)."""
    segments = {}
    for name, data in pngs:
        ids = _pil_segment_ids(io.BytesIO(data))
        segments[name.split("gt/panoptic/", 1)[-1]] = set(np.unique(ids).tolist()), ids.shape
    return segments


def _pil_segment_ids(png_file):
    """The (H, W) segment ids of a panoptic PNG as PIL reads it (id = R + 256 G + 65536 B)."""
    from PIL import Image
    with Image.open(png_file) as png:
        rgb = np.asarray(png.convert("RGB"), np.int64)
    return rgb[..., 0] + 256 * rgb[..., 1] + 65536 * rgb[..., 2]


def _valid_yaml(sgeval):
    import yaml
    try:
        values = yaml.safe_load(Path("config.yaml").read_text(encoding="utf-8"))
    except (ValueError, RecursionError, yaml.YAMLError):
        return False, True
    return valid_config(values or {}, _config_fields(sgeval))


_CLI_KEYS = {"--k": "k", "--imr-k": "imr_k", "--metrics": "metrics", "--protocol": "protocol",
             "--protocols": "protocols", "--iou-threshold": "iou_threshold", "--wimr-tau": "wimr_tau",
             "--absent-predicates": "absent_predicates", "--aggregation": "aggregation", "--workers": "workers",
             "--output": "output", "--train-gt": "train_gt", "--zeroshot-triplets": "zeroshot_triplets",
             "--gt": "gt", "--gt-seg": "gt_seg", "--pred": "pred"}


def _valid_argv(argv, sgeval):
    """The command line's options as click converts them (the last of a repeated option wins),
    judged by valid_config."""
    given = {}
    options = [item for item in argv if item != "--quiet"]
    for option, value in zip(options[::2], options[1::2]):
        if value.startswith("-"):  # click may read it as an option
            return False, False
        given[option] = value
    values = {}
    for option, value in given.items():  # click converts the last value of an option only
        try:
            values[_CLI_KEYS[option]] = (int(value) if option == "--workers" else float(value)
                                         if option in ("--iou-threshold", "--wimr-tau") else value)
        except ValueError:  # click's usage error (exit 2)
            return False, True
    return valid_config(values, _config_fields(sgeval))


def _config_fields(sgeval):
    return [field.name for field in sgeval.dataclasses.fields(sgeval.Config)]


def _npz_reference(data=None):
    """{name: array} of the case's raw.npz (or of the given bytes) as numpy's own reader reads it, or
    None when it cannot."""
    try:
        with np.load("raw.npz" if data is None else io.BytesIO(data), allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except Exception:  # noqa: BLE001 -- any failure of the reference: it cannot read the file
        return None


def _same_arrays(ours, reference):
    """Whether two {name: value} mappings hold the same values (arrays: dtype, shape and items)."""
    return ours.keys() == reference.keys() and all(_same(ours[k], reference[k]) for k in ours)


def _same(a, b):
    if hasattr(a, "fields") and hasattr(b, "fields"):  # sgeval_convert.common's RawResult and BoxList holders
        return type(a) is type(b) and _same(a.fields, b.fields)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype \
            and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and _same_arrays(a, b)
    return type(a) is type(b) and (a == b or a != a and b != b)  # NaN equals NaN here


def _same_results(ours, reference):
    """Whether two lists of results (dicts of fields) hold the same values."""
    if not all(isinstance(r, (list, tuple)) for r in (ours, reference)) or len(ours) != len(reference):
        return False
    return all(isinstance(r, dict) and _same_arrays(o if isinstance(o, dict) else o.fields, r)
               for o, r in zip(ours, reference))


def _pickle_reference(path):
    """The pickle file as the pickle module with numpy's own reconstructors reads it: results as
    dicts of fields (a Result's state), or None when that fails. It runs in a forked child, as
    numpy's reconstructors trust their input (they crash on crafted arguments)."""
    data = Path(path).read_bytes()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        signal.alarm(10)
        try:
            reply = pickle.dumps(_fields_of(_ReferenceUnpickler(io.BytesIO(data)).load()))
        except BaseException:  # noqa: BLE001 -- the reference cannot read it
            reply = pickle.dumps(None)
        with os.fdopen(write, "wb") as pipe:
            pipe.write(reply)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        reply = pipe.read()
    _, status = os.waitpid(pid, 0)
    return pickle.loads(reply) if status == 0 and reply else None


class _ReferenceUnpickler(pickle.Unpickler):
    """numpy, a few builtins and Result classes (read as a dict of their state); nothing else."""

    def find_class(self, module, name):
        if module.split(".")[0] in ("numpy", "_codecs", "collections") or module in ("builtins", "__builtin__") \
                and name in ("bytes", "bytearray", "set", "frozenset", "complex"):
            return super().find_class(module, name)
        if name == "Result":
            return _ReferenceResult
        raise pickle.UnpicklingError(f"{module}.{name}")


class _ReferenceResult:
    def __setstate__(self, state):
        self.state = state


def _fields_of(value):
    if isinstance(value, (list, tuple)):
        return [item.state if isinstance(item, _ReferenceResult) else item for item in value]
    return value


def _same_masks_as_tifffile(case, sgeval):
    import tifffile
    source = sgeval.PredSource("pred.zip")
    records = sgeval.read_predictions("pred.zip", len(THINGS + STUFF), len(PREDICATES), "mask")[1].values()
    record = {r.seg_filename: r for r in records}[case["member"]]
    ours = sgeval.load_pred_masks(source, record, HEIGHT, WIDTH).copy()
    try:
        layers = []
        with tifffile.TiffFile(io.BytesIO(source.read(case["member"]))) as tiff:
            while sum(map(len, layers)) < len(ours):  # the pages the masks need, not a bad link after them
                page = tiff.pages[len(layers)]
                array = page.asarray()
                layers.append(np.moveaxis(array, -1, 0) if page.axes.endswith("S") else array.reshape(-1, HEIGHT, WIDTH))
        masks = np.concatenate(layers) != 0
    except Exception as error:  # noqa: BLE001
        return "silent", f"tifffile cannot read what sgeval accepted: {type(error).__name__}: {error}"
    if masks.shape != (len(ours), HEIGHT, WIDTH) or not np.array_equal(sgeval.pack_masks(masks), ours):
        return "silent", f"masks differ from tifffile's ({masks.shape})"
    return "accepted", ""


def _same_segments_as_pil(case, sgeval):
    gt = sgeval.read_gt("gt/psg.json", "gt/panoptic")
    image = next((i for i in gt.images if i.seg_path.endswith("/" + case["member"].split("/")[-1])), None)
    if image is None:  # the PNG of an image that is not evaluated: never read
        return "accepted", ""
    ours = sgeval.load_gt_masks(image).copy()
    try:
        ids = _pil_segment_ids(case["member"])
    except Exception as error:  # noqa: BLE001
        return "silent", f"PIL cannot read what sgeval accepted: {type(error).__name__}: {error}"
    reference = sgeval.pack_masks(np.stack([ids == s for s in image.segment_ids]))
    return ("accepted", "") if np.array_equal(reference, ours) else ("silent", "GT masks differ from PIL's pixels")


def _read_message(stream):
    header = stream.read(4)
    if len(header) < 4:
        return None
    return pickle.loads(stream.read(struct.unpack(">I", header)[0]))


def _write_message(stream, value):
    data = pickle.dumps(value)
    stream.write(struct.pack(">I", len(data)) + data)
    stream.flush()


def main():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
    inbox, outbox = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # anything printed goes to stderr, not into the protocol
    base = _read_message(inbox)
    import sgeval  # noqa: F401 -- imported (and its kernels loaded) before the first timed case
    while (case := _read_message(inbox)) is not None:
        _write_message(outbox, run_case(case, base, folder))


if __name__ == "__main__":
    main()
