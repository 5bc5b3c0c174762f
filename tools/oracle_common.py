"""What the legacy tools' oracle harnesses share (tools/openpsg_check, tools/sgb_check,
tools/oi_check; their shell side: tools/oracle_common.sh).

Each harness loads a tool's real source files under their own module names beside stand-ins for
what they import (module, package, load_source, never_called, require_source), runs the tool's
evaluation on generated data, alters it to show which rules the data decide (patched,
iou_without_plus_one, iou_plus_one_float64), and stores what it gave as the fixtures of make test (write_json,
write_zip, fixtures_main), whose bytes depend on their contents only.
"""

import argparse
import contextlib
import importlib.util
import json
import sys
import types
import zipfile
from pathlib import Path

import numpy as np

ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # every zip member's time: the bytes depend only on the contents


# --- the tool's code in sys.modules ------------------------------------------------------------------


def module(name, **attributes):
    """The module `name` in sys.modules (made empty when absent), with `attributes` set on it."""
    found = sys.modules.get(name) or types.ModuleType(name)
    found.__dict__.update(attributes)
    sys.modules[name] = found
    return found


def package(name, folder=None):
    """The package `name` in sys.modules: empty, or over the real `folder` (its __init__ not run)."""
    return module(name, __path__=[str(folder)] if folder else [])


def load_source(name, path):
    """Execute the source file `path` as module `name` (its parent packages need not be real)."""
    spec = importlib.util.spec_from_file_location(name, path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded
    spec.loader.exec_module(loaded)
    return loaded


def never_called(harness, what):
    """A stand-in for a function the evaluation imports but never calls: it raises."""
    def stand_in(*args, **kwargs):
        raise NotImplementedError(f"{harness} stand-in: {what} is not part of the relation evaluation")

    return stand_in


def require_source(build, source, package_name, tool, variable):
    """Exit with one line unless setup.sh extracted the tool's package to build/source and this
    Python imports it from there (build/venv's .pth file)."""
    if not (source / package_name).is_dir():
        sys.exit(f"{build}: {tool}'s source is missing; run {variable}=<checkout> {build.parent}/setup.sh")
    found = importlib.util.find_spec(package_name)
    if found is None or Path(found.origin).parent != source / package_name:
        sys.exit(f"{build}: import {package_name} from its extracted source: run with {build}/venv/bin/python "
                 f"(its {build.parent.name}.pth puts {source} on the path)")


# --- running and altering the tool's evaluation -----------------------------------------------------


def boxlists(BoxList, data, task, n):
    """DIR/raw/<task>/0.npz ... n-1.npz as the tool's BoxLists (network input size): bbox and size
    make the BoxList, every other array is a field, in file order."""
    import torch  # the harnesses' own venv has it

    out = []
    for i in range(n):
        with np.load(Path(data, "raw", task, f"{i}.npz")) as npz:
            box = BoxList(torch.from_numpy(npz["bbox"]), tuple(int(v) for v in npz["size"]), "xyxy")
            for key in npz.files:
                if key not in ("bbox", "size"):
                    box.add_field(key, torch.from_numpy(npz[key]))
        out.append(box)
    return out


def without_repeats(relationships):
    """Each image's GT relation rows without exact repeats, first occurrences in order (a mutant's
    rule, not the tools')."""
    return [rows[np.sort(np.unique(rows, axis=0, return_index=True)[1])] for rows in relationships]


def iou_plus_one_float64(a, b):
    """The +1 pixel box IoU (SGB's and PySGG's boxlist_iou / bbox_overlaps) in float64 of the same
    boxes, (M, 4) x (N, 4) -> (M, N): what their float32 IoU would be without its rounding."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    wh = np.maximum(np.minimum(a[:, None, 2:], b[:, 2:]) - np.maximum(a[:, None, :2], b[:, :2]) + 1, 0)
    inter = wh[..., 0] * wh[..., 1]
    area = lambda x: (x[:, 2] - x[:, 0] + 1) * (x[:, 3] - x[:, 1] + 1)  # noqa: E731
    return inter / (area(a)[:, None] + area(b) - inter)


@contextlib.contextmanager
def patched(owner, name, value):
    """owner.name replaced by value while the context lasts."""
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


def iou_without_plus_one(boxlist1, boxlist2):
    """boxlist_iou's formula with widths x2 - x1 (float32), for the mutants of SGB's and PySGG's."""
    import torch  # the harnesses' own venv has it

    a, b = boxlist1.bbox, boxlist2.bbox
    area_a, area_b = ((x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1]) for x in (a, b))
    wh = (torch.min(a[:, None, 2:], b[:, 2:]) - torch.max(a[:, None, :2], b[:, :2])).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[:, None] + area_b - inter)


# --- the fixtures ------------------------------------------------------------------------------------


def write_json(path, numbers):
    """One key a line, floats at full repr precision."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in numbers.items())
                          + "\n}\n")


def write_zip(path, members, compress=zipfile.ZIP_DEFLATED):
    """A zip of {name: bytes}, names sorted, fixed times and modes (644): the same members, the same
    bytes."""
    with zipfile.ZipFile(path, "w") as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, ZIP_TIME)
            info.compress_type, info.external_attr = compress, 0o644 << 16
            archive.writestr(info, members[name], compresslevel=9)


def fixtures_main(description, default_out, fixtures, write_fixture):
    """make_fixtures.py's command line: --out DIR (default default_out), then
    write_fixture(name, *arguments, out) for each {name: arguments} of fixtures."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", default=str(default_out))
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for name, arguments in fixtures.items():
        write_fixture(name, *arguments, Path(args.out))
