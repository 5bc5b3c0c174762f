"""Build what an EvalAI challenge host uploads, from the repository root:

    python -m evalai.build --out evalai/dist/ [--annotations evalai/annotations/]
    python -m evalai.build annotations --gt psg.json --gt-seg coco/ --out evalai/annotations/psg_test.zip

The first writes ``evaluation_script.zip`` (``evalai/evaluation_script/``, a copy of ``sgeval.py``
and a ``requirements.txt`` of sgeval's pinned dependencies, all at the top level, the way EvalAI's
worker extracts it into a package) and ``challenge_config.zip`` (``challenge_config.yaml`` and every
file it names: the templates, a generated logo, ``evaluation_script.zip`` and each phase's test
annotation file, taken from ``--annotations``). It first checks the config the way EvalAI's loader
does and against the evaluation script: each phase's dataset split, leaderboard labels and
default_order_by must be what ``main.py`` reports. Problems are printed one per line (exit 1);
``evaluation_script.zip`` is written either way. Both ZIPs are the same bytes for the same inputs.

The second writes a phase's test annotation file: ``psg.json`` as it is and, with ``--gt-seg``, the
panoptic PNGs of the images sgeval evaluates (the test images with a relation) under ``panoptic/``,
at their ``pan_seg_file_name``. sgeval reads and checks the annotations first.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import sys
import tomllib
import zipfile
from pathlib import Path, PurePosixPath

import yaml
from PIL import Image, ImageDraw

import sgeval
from evalai.evaluation_script import main as script

KIT = Path(__file__).resolve().parent
ROOT = KIT.parent
HTML_FIELDS = ("description", "evaluation_details", "terms_and_conditions", "submission_guidelines")
PHASE_SPLIT_KEYS = ("challenge_phase_id", "leaderboard_id", "dataset_split_id", "visibility",
                    "leaderboard_decimal_precision", "is_leaderboard_order_descending")
DOMAINS = ("CV", "NLP", "RL", "MM", "AUD", "TAB")
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


class BuildError(Exception):
    """Problems, one line each; written: what was written all the same."""

    def __init__(self, problems, written=()):
        self.problems, self.written = problems, list(written)
        super().__init__("\n".join(problems))


def runtime_requirements():
    """The lines of requirements.txt that pin sgeval's own dependencies (pyproject.toml's)."""
    def key(name):
        return re.sub(r"[-_.]+", "-", name).lower()

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = {key(re.match(r"[A-Za-z0-9_.-]+", spec).group()) for spec in project["dependencies"]}
    lines = [line.strip() for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()]
    pinned = [line for line in lines if "==" in line and key(line.split("==")[0]) in wanted]
    if len(pinned) != len(wanted):
        raise BuildError([f"requirements.txt pins {len(pinned)} of sgeval's {len(wanted)} dependencies"])
    return "".join(f"{line}\n" for line in pinned)


def write_zip(path, members):
    """A ZIP of members {name: bytes or a file's Path}, in name order with fixed times: the same
    bytes each build."""
    with zipfile.ZipFile(path, "w") as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, ZIP_TIME)
            info.external_attr, info.compress_type = 0o644 << 16, zipfile.ZIP_DEFLATED
            if isinstance(members[name], bytes):
                archive.writestr(info, members[name])
            else:
                with open(members[name], "rb") as source, archive.open(info, "w") as sink:
                    shutil.copyfileobj(source, sink, 1 << 20)
    return Path(path)


def evaluation_script_members():
    package = KIT / "evaluation_script"
    members = {path.name: path.read_bytes() for path in sorted(package.glob("*.py"))}
    return {**members, "sgeval.py": (ROOT / "sgeval.py").read_bytes(),
            "requirements.txt": runtime_requirements().encode()}


def logo_png():
    """A 128 x 128 placeholder logo: a small scene graph (three nodes, two edges)."""
    image = Image.new("RGB", (128, 128), (245, 247, 250))
    draw = ImageDraw.Draw(image)
    nodes = [(32, 40), (96, 40), (64, 96)]
    for a, b in ((0, 2), (1, 2)):
        draw.line([nodes[a], nodes[b]], fill=(90, 100, 120), width=4)
    for x, y in nodes:
        draw.ellipse([x - 14, y - 14, x + 14, y + 14], fill=(40, 110, 200))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def _relative(value):
    """A config path that stays inside the config's folder, else None."""
    path = PurePosixPath(str(value))
    return None if path.is_absolute() or ".." in path.parts or "\\" in str(value) else path


def config_files(config, annotations, evaluation_script):
    """({name in challenge_config.zip: bytes or Path}, problems) for the files the config names."""
    members, problems = {}, []

    def take(field, value, source=None, suffixes=(".html",)):
        path = _relative(value) if isinstance(value, str) else None
        if path is None or path.suffix not in suffixes:
            problems.append(f"{field}: '{value}' is not a relative path to a {' / '.join(suffixes)} file")
        elif source is not None:
            members[str(path)] = source
        elif (KIT / path).is_file():
            members[str(path)] = (KIT / path).read_bytes()
        else:
            problems.append(f"{field}: {KIT / path} does not exist")

    for field in HTML_FIELDS:
        take(field, config.get(field))
    for phase in config.get("challenge_phases") or ():
        where, value = f"phase {phase.get('codename')}", phase.get("test_annotation_file")
        take(f"{where}: description", phase.get("description"))
        path = _relative(value) if isinstance(value, str) and value else None
        source = None if path is None else Path(annotations, *path.parts[1:]) \
            if path.parts[:1] == ("annotations",) else KIT / path
        if source is not None and source.is_file():
            members[str(path)] = source
        else:
            problems.append(f"{where}: test_annotation_file '{value}' is not a file (annotations/... are read from "
                            f"{annotations}; make them with python -m evalai.build annotations)")
    take("image", config.get("image"), logo_png(), (".png",))
    take("evaluation_script", config.get("evaluation_script"), evaluation_script, (".zip",))
    return members, problems


def config_problems(config):
    """What EvalAI's challenge-config loader would refuse, and any mismatch with the script."""
    if not isinstance(config, dict):
        return ["challenge_config.yaml is not a mapping"]
    problems = [f"'{key}' is missing" for key in ("title", "start_date", "end_date", "leaderboard", "challenge_phases",
                                                  "dataset_splits", "challenge_phase_splits") if not config.get(key)]
    if problems:
        return problems
    problems += _dates("the challenge", config)
    if len(config.get("tags") or ()) > 4:
        problems.append("more than 4 tags")
    if "domain" in config and config["domain"] not in DOMAINS:
        problems.append(f"domain '{config['domain']}' is not one of {', '.join(DOMAINS)}")
    boards = {}
    for board in config["leaderboard"]:
        schema = board.get("schema") or {}
        labels = schema.get("labels") or []
        if "id" not in board or not labels or schema.get("default_order_by") not in labels:
            problems.append(f"leaderboard {board.get('id')}: needs an id, labels and a default_order_by among them")
        problems += [f"leaderboard {board.get('id')}: metadata for '{name}', which is not a label"
                     for name in schema.get("metadata") or {} if name not in labels]
        boards[board.get("id")] = schema
    phases = {phase.get("id"): phase for phase in config["challenge_phases"]}
    codenames = [phase.get("codename") for phase in phases.values()]
    problems += [f"phase codename '{name}' is used twice" for name in set(codenames) if codenames.count(name) > 1]
    for phase in phases.values():
        problems += _dates(f"phase {phase.get('codename')}", phase)
        if phase.get("is_submission_public") and phase.get("is_restricted_to_select_one_submission"):
            problems.append(f"phase {phase.get('codename')}: is_submission_public with "
                            "is_restricted_to_select_one_submission")
    splits = {split.get("id"): split.get("codename") for split in config["dataset_splits"]}
    if len(set(splits.values())) < len(splits) or None in splits.values():
        problems.append("dataset split codenames must be given and distinct")
    links, seen = {}, set()
    for link in config["challenge_phase_splits"]:
        missing = [key for key in PHASE_SPLIT_KEYS if key not in link]
        triple = tuple(link.get(key) for key in PHASE_SPLIT_KEYS[:3])
        if missing or triple in seen or triple[0] not in phases or triple[1] not in boards or triple[2] not in splits:
            problems.append(f"challenge phase split {triple}: missing {', '.join(missing) or 'nothing'}, "
                            "or a duplicate, or an unknown phase, leaderboard or dataset split id")
            continue
        seen.add(triple)
        links.setdefault(phases[triple[0]].get("codename"), {})[splits[triple[2]]] = boards[triple[1]]
    for codename in codenames:
        problems += _script_problems(codename, links.get(codename, {}))
    return problems


def _dates(what, data):
    start, end = data.get("start_date"), data.get("end_date")
    if not start or not end:
        return [f"{what}: start_date and end_date are required"]
    return [f"{what}: start_date is after end_date"] if str(start) > str(end) else []


def _script_problems(codename, linked):
    """The phase's linked {split codename: leaderboard schema} against evaluation_script/main.py."""
    if codename not in script.PHASES:
        return [f"phase '{codename}' is not in the evaluation script's PHASES ({', '.join(script.PHASES)})"]
    split = script.PHASES[codename].split
    if split not in linked:
        return [f"phase '{codename}': the script reports dataset split '{split}', which challenge_phase_splits "
                f"does not link to the phase (linked: {', '.join(linked) or 'none'})"]
    problems = [f"phase '{codename}': dataset split '{name}' is linked but the script never reports it"
                for name in linked if name != split]
    labels, columns = linked[split].get("labels"), script.columns(codename)
    if labels != columns:
        problems.append(f"phase '{codename}': the leaderboard labels differ from the script's columns: "
                        f"{[c for c in columns if c not in (labels or [])]} missing, "
                        f"{[label for label in labels or [] if label not in columns]} extra, or another order")
    if linked[split].get("default_order_by") != script.order_by(codename):
        problems.append(f"phase '{codename}': default_order_by is '{linked[split].get('default_order_by')}', "
                        f"the script ranks by '{script.order_by(codename)}'")
    return problems


def bundle(out, annotations=None, config_path=KIT / "challenge_config.yaml"):
    """Write evaluation_script.zip and challenge_config.zip into out; returns their paths. Raises
    BuildError (evaluation_script.zip written) when the config has problems or files are missing."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    script_zip = write_zip(out / "evaluation_script.zip", evaluation_script_members())
    text = Path(config_path).read_bytes()
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise BuildError([f"{config_path}: {' '.join(str(error).split())}"], [script_zip]) from None
    problems = config_problems(config)
    members, missing = config_files(config, annotations or KIT / "annotations", script_zip.read_bytes()) \
        if isinstance(config, dict) else ({}, [])
    if problems or missing:
        raise BuildError([f"{config_path}: {problem}" for problem in problems + missing], [script_zip])
    return script_zip, write_zip(out / "challenge_config.zip", {**members, "challenge_config.yaml": text})


def write_annotations(gt, gt_seg, out):
    """Write a phase's test annotation ZIP; returns (its path, number of PNGs)."""
    gt_data = sgeval.read_gt(str(gt), None if gt_seg is None else str(gt_seg))
    pngs = {}
    for image in gt_data.images if gt_seg is not None else ():
        name = PurePosixPath(*Path(os.path.relpath(image.seg_path, gt_seg)).parts)
        if ".." in name.parts:
            raise BuildError([f"{gt}: image {image.image_id}: pan_seg_file_name leads out of {gt_seg}"])
        pngs[f"{script.PANOPTIC}{name}"] = image.seg_path
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as archive:
        archive.write(gt, "psg.json", zipfile.ZIP_DEFLATED)
        for name in sorted(pngs):
            archive.write(pngs[name], name, zipfile.ZIP_STORED)  # PNGs are compressed already
    return Path(out), len(pngs)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else [str(arg) for arg in argv]
    if argv[:1] == ["annotations"]:
        parser = argparse.ArgumentParser(prog="python -m evalai.build annotations",
                                         description="Write a phase's test annotation ZIP.")
        parser.add_argument("--gt", required=True, help="psg.json (kept as it is)")
        parser.add_argument("--gt-seg", help="the folder pan_seg_file_name is relative to (omit for box mode)")
        parser.add_argument("--out", required=True, help="the ZIP to write")
        args = parser.parse_args(argv[1:])
        try:
            path, n_pngs = write_annotations(args.gt, args.gt_seg, args.out)
        except (sgeval.SGEvalError, BuildError) as error:
            return _fail(error.problems)
        print(f"wrote {path}: psg.json and {n_pngs} panoptic PNGs")
        return 0
    parser = argparse.ArgumentParser(prog="python -m evalai.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(KIT / "dist"), help="output folder (default: evalai/dist)")
    parser.add_argument("--annotations", default=str(KIT / "annotations"),
                        help="where the config's annotations/ files are (default: evalai/annotations)")
    args = parser.parse_args(argv)
    try:
        paths = bundle(args.out, args.annotations)
    except BuildError as error:
        if error.written:
            print(f"wrote {' and '.join(map(str, error.written))}; no challenge_config.zip:", file=sys.stderr)
        return _fail(error.problems)
    print("wrote " + " and ".join(map(str, paths)))
    return 0


def _fail(problems):
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
