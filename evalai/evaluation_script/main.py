"""sgeval as an EvalAI evaluation script.

EvalAI's submission worker extracts the challenge's evaluation script ZIP (this folder plus a copy
of ``sgeval.py`` and a ``requirements.txt``, made by ``python -m evalai.build``) into
``challenge_data/challenge_<id>/``, imports that folder as a package and, for each submission, calls

    evaluate(test_annotation_file, user_annotation_file, phase_codename, submission_metadata={...})

with the local paths of the phase's test annotation file and of the participant's file. It returns
``{"result": [{split_codename: {column: number}}], "submission_result": ..., "submission_metadata":
...}``: one leaderboard row for the phase's dataset split, one column per protocol and metric
(``R@50 (singlempo)``), the panoptic quality keys a phase names (``PQ``, once: they do not depend
on the protocol), plus the protocol audit and the images without a prediction. Which
protocols, metrics and cut-offs a phase reports is ``PHASES`` below; the challenge config's
leaderboard ``labels`` must be ``columns(codename)`` (``python -m evalai.build`` checks that).

The test annotation file is a ZIP holding ``psg.json`` and, for mask mode, ``panoptic/`` (the
``pan_seg_file_name`` PNGs of the test images), made by ``python -m evalai.build annotations``; a
plain ``psg.json`` (not a ZIP) is evaluated in box mode. The ZIP is checked and extracted into a
temporary folder that is removed afterwards. The participant's file is any prediction file sgeval
reads (a ``.zip`` in mask mode; a ``.json`` in box mode): sgeval tells them apart by content.

Bad input ends in an exception, which the worker writes, with its traceback, to the stderr file
the participant sees (EvalAI-Starters' remote worker sends its message): sgeval's problem lines
(file, image id, field), the participant's file named by its file name and the hidden annotations
as ``<test annotations>``, never by their paths. ``remote_result`` turns ``result`` into the form
remote evaluation reports (evalai/README.md).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import tempfile
import traceback
import zipfile
from pathlib import Path, PurePosixPath

if Path(__file__).with_name("sgeval.py").is_file():
    from . import sgeval  # the copy that evalai/build.py bundles beside this file
else:
    import sgeval  # running from a checkout of the repository


@dataclasses.dataclass(frozen=True)
class Phase:
    """What one challenge phase reports."""

    split: str  # the dataset split codename its leaderboard row goes to (the config's dataset_splits)
    protocol: str = "singlempo"  # the headline protocol: its columns come first
    protocols: tuple = ("unique", "openpsg", "multimpo")  # more columns, evaluated in the same run
    metrics: tuple = ("R", "mR")  # metric families, one column per cut-off
    k: tuple = ("20", "50", "100")
    order_by: str = "mR@50"  # the headline protocol's metric (or a pq key) that ranks the leaderboard
    pq: tuple = ()  # panoptic quality keys (sgeval.PQ_KEYS: PQ, SQ, RQ, PQ_th, ...): pq on (mask mode only;
    # masks that overlap need config pq_merge), one column each after the protocols' columns
    config: dict = dataclasses.field(default_factory=dict)  # any other sgeval config key (task, workers, ...)


PHASES = {  # phase codename (challenge_config.yaml) -> Phase
    "dev": Phase(split="dev_split"),
    "test": Phase(split="test_split"),
}

AUDIT_COLUMNS = {  # column -> protocol_audit field: its per-image mean
    "duplicate instances per image": "duplicate_instances",
    "duplicate relations per image": "duplicate_relations_after_merge",
}
MISSING_COLUMN = "images without prediction"
HIDDEN = "<test annotations>"  # what messages say instead of the test annotations' paths

MAX_ANNOTATION_BYTES = 32 << 30  # the extracted test annotations, in total
MAX_ANNOTATION_MEMBERS = 1_000_000
PANOPTIC = "panoptic/"


class SubmissionError(Exception):
    """sgeval's problems with the submission (or the annotations): the message participants see."""


class AnnotationError(Exception):
    """The phase's test annotation file is unusable (the host's to fix)."""


def phase_protocols(phase):
    return tuple(dict.fromkeys((phase.protocol, *phase.protocols)))


def columns(codename):
    """The leaderboard columns (labels) of a phase, in order."""
    phase = PHASES[codename]
    return [f"{family}@{k} ({protocol})" for protocol in phase_protocols(phase)
            for family in phase.metrics for k in phase.k] + [*phase.pq, *AUDIT_COLUMNS, MISSING_COLUMN]


def order_by(codename):
    """The column that ranks a phase's leaderboard (the config's default_order_by)."""
    phase = PHASES[codename]
    return phase.order_by if phase.order_by in phase.pq else f"{phase.order_by} ({phase.protocol})"


def evaluate(test_annotation_file, user_annotation_file, phase_codename, **kwargs):
    """Evaluate one submission; the signature EvalAI's worker calls (kwargs: submission_metadata)."""
    phase = PHASES.get(phase_codename)
    if phase is None:
        raise ValueError(f"phase codename '{phase_codename}' is not one of this evaluation script's phases "
                         f"(PHASES in main.py): {', '.join(PHASES)}")
    name = os.path.basename(str(user_annotation_file))
    with tempfile.TemporaryDirectory(prefix="sgeval-evalai-") as work:
        gt, gt_seg = unpack_annotations(test_annotation_file, Path(work, "gt"))
        pred = _alone(user_annotation_file, Path(work, "submission"))
        hidden = {str(Path(work, "gt")): HIDDEN, str(test_annotation_file): HIDDEN,
                  str(pred): name, str(user_annotation_file): name, work: "<temporary folder>"}
        config = {"gt": str(gt), "gt_seg": gt_seg and str(gt_seg), "pred": str(pred), "protocol": phase.protocol,
                  "protocols": list(phase.protocols), "metrics": list(phase.metrics), "k": list(phase.k),
                  **({"pq": True} if phase.pq else {}), **phase.config}
        try:
            results = sgeval.evaluate(sgeval.make_config(config))
        except sgeval.SGEvalError as error:
            problems = [_hide(problem, hidden) for problem in error.problems]
            whose = "the submission cannot be evaluated" if all(p.startswith(f"{name}:") for p in problems) else \
                "the evaluation failed (a problem of the test annotations or the script is the hosts' to fix)"
            raise SubmissionError(f"{whose} (sgeval {sgeval.__version__}, phase '{phase_codename}'):\n"
                                  + "\n".join(problems)) from None
        except Exception as error:  # noqa: BLE001 -- no problem sgeval names: its traceback helps the host
            raise RuntimeError(f"sgeval {sgeval.__version__} failed on this submission ({type(error).__name__}):\n"
                               + _hide(traceback.format_exc(), hidden)) from None
    row = leaderboard_row(phase, results)
    warnings = [_hide(warning, hidden) for warning in results["warnings"]]
    print(f"sgeval {sgeval.__version__}, phase '{phase_codename}': {results['images']['evaluated']} images "
          f"evaluated, {results['images']['missing_predictions']} without a prediction")
    for warning in warnings:
        print(f"warning: {warning}")
    return {"result": [{phase.split: row}], "submission_result": {phase.split: row},
            "submission_metadata": {"sgeval_version": sgeval.__version__, "images": results["images"],
                                    "warnings": warnings}}


def leaderboard_row(phase, results):
    """The phase's columns from sgeval's results: metrics in percent, audit means, missing images."""
    by_protocol = results.get("by_protocol") or {phase.protocol: results}
    row = {}
    for protocol in phase_protocols(phase):
        metrics = by_protocol[protocol]["metrics"]
        for family in phase.metrics:
            for k in phase.k:
                key = f"{family}@{k}"
                if metrics.get(key) is None:  # a leaderboard cell must be a number
                    raise RuntimeError(f"sgeval's results have no value for {key} under {protocol} "
                                       f"(undefined on this phase's test annotations, or not a per-cut-off metric)")
                row[f"{key} ({protocol})"] = round(100 * metrics[key], 2)
    for key in phase.pq:  # the masks' panoptic quality, whatever the protocol
        if results["metrics"].get(key) is None:
            raise RuntimeError(f"sgeval's results have no value for {key} (pq: true needs mask mode; a mean over "
                               f"no category, such as PQ_st without stuff segments, has none)")
        row[key] = round(100 * results["metrics"][key], 2)
    audit = results["protocol_audit"]
    if audit is None:
        raise RuntimeError("the audit columns need sgeval's protocol audit: do not set audit: false")
    row.update({column: round(audit["per_image_mean"][field], 2) for column, field in AUDIT_COLUMNS.items()})
    row[MISSING_COLUMN] = results["images"]["missing_predictions"]
    return row


def remote_result(result, show_to_participant=True):
    """The ``result`` list of evaluate() in the form EvalAI's remote evaluation reports it (its
    update_submission API): [{"split": codename, "show_to_participant": bool, "accuracies": row}]."""
    return [{"split": split, "show_to_participant": show_to_participant, "accuracies": row}
            for entry in result for split, row in entry.items()]


def _hide(text, hidden):
    """text with every path of hidden (and its real path) replaced by its label, longest first."""
    pairs = {**{os.path.realpath(path): label for path, label in hidden.items()}, **hidden}
    for path in sorted(pairs, key=len, reverse=True):
        text = text.replace(path, pairs[path])
    return text


def _alone(path, folder):
    """A link to the participant's file in a folder of its own, under its file name: a prediction
    .json that names mask files beside it finds none of the worker's other files."""
    folder.mkdir()
    link = folder / os.path.basename(str(path))
    try:
        os.symlink(os.path.abspath(path), link)
    except OSError:
        return Path(path)
    return link


def unpack_annotations(path, folder):
    """(psg.json, panoptic root or None) of a phase's test annotation file, a ZIP extracted into
    folder after checking every member; a file that is not a ZIP is a psg.json for box mode."""
    try:
        with open(path, "rb") as handle:
            is_zip = handle.read(4) == b"PK\x03\x04"
    except OSError as error:
        raise AnnotationError(f"the phase's test annotation file cannot be read: {error.strerror}") from None
    if not is_zip:
        return Path(path), None
    try:
        with zipfile.ZipFile(path) as archive:
            members = _checked_members(archive.infolist())
            folder.mkdir()
            for info in members:
                _extract(archive, info, folder)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, NotImplementedError) as error:
        raise AnnotationError(f"the phase's test annotation ZIP cannot be extracted: {type(error).__name__}: "
                              f"{getattr(error, 'strerror', None) or error}".replace(str(folder), HIDDEN)) from None
    has_masks = any(info.filename.startswith(PANOPTIC) for info in members)
    return folder / "psg.json", folder / PANOPTIC if has_masks else None


def _checked_members(infos):
    """The file members of the annotation ZIP, after the checks that come before extracting."""
    problems, names, total = [], set(), 0
    files = [info for info in infos if not info.is_dir()]
    for info in files:
        name = info.filename
        if sgeval.unsafe_member(name) or "\\" in name or "" in name.split("/"):  # sgeval's rule for ZIP members, stricter
            problems.append(f"member '{name}' has an unsafe path (absolute, '..', a backslash or a drive)")
        elif name != "psg.json" and not name.startswith(PANOPTIC):
            problems.append(f"member '{name}' is neither psg.json nor under {PANOPTIC}")
        elif stat.S_ISLNK(info.external_attr >> 16) or info.flag_bits & 0x1:
            problems.append(f"member '{name}' is a symbolic link or encrypted")
        elif name in names:
            problems.append(f"member '{name}' appears twice")
        names.add(name)
        total += info.file_size
    if "psg.json" not in names:
        problems.append("no psg.json at the top level")
    if len(files) > MAX_ANNOTATION_MEMBERS:
        problems.append(f"{len(files)} members, more than the limit of {MAX_ANNOTATION_MEMBERS}")
    if total > MAX_ANNOTATION_BYTES:
        problems.append(f"{total} bytes extracted, more than the limit of {MAX_ANNOTATION_BYTES} "
                        f"(MAX_ANNOTATION_BYTES in main.py)")
    if problems:
        raise AnnotationError("the phase's test annotation ZIP is not usable (make it with python -m evalai.build "
                              "annotations): " + "; ".join(problems[:20]))
    return files


def _extract(archive, info, folder):
    """One checked member, written as a new file (zipfile's reader stops at the declared size and
    checks the CRC, so the limits checked before hold)."""
    target = folder.joinpath(*PurePosixPath(info.filename).parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    with archive.open(info) as source, open(target, "xb") as sink:
        shutil.copyfileobj(source, sink, 1 << 20)
