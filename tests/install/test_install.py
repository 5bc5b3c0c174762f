"""sgeval as a stranger gets it: the wheel built from this checkout, installed into a fresh venv
outside the repository, used from another folder with nothing of the checkout on the path:
``sgeval --help``, ``sgeval convert --help``, a raw OpenPSG output converted and evaluated to a
number, ``sgeval report`` on the result, ``sgeval serve --help`` (the serve extra).

How it stays offline and fast (about 25 s on 2 cores, half of it numba compiling the installed
sgeval.py):

* The wheel is built once per module by ``pip wheel --no-deps --no-build-isolation`` with the
  setuptools that ``make setup`` installs (requirements-dev.txt pins it), from a copy of what the
  distribution is made of (pyproject.toml, README.md, the top-level ``sgeval*`` modules and
  packages) in a temporary folder, so that building writes nothing into the checkout.
* The venv is made by ``python -m venv --without-pip``. A venv made from a venv's python is
  isolated from the parent venv's packages, and ``--system-site-packages`` would give the base
  interpreter's (which lacks numba and the rest), so the dependencies come from the running
  interpreter's site-packages (``make setup``'s .venv, filled from the pinned requirements files)
  through a folder of symbolic links to its entries, minus sgeval's own (its dist-info and the
  editable install's finder pointing at a checkout), named by a ``.pth`` file of the new venv.
  ``pip install --no-index 'sgeval-*.whl[serve,vg150]'`` then checks every declared dependency,
  extras included, against those pinned versions and installs only sgeval (no network).
"""

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, sgeval, synth

from sgeval_convert import cli, openpsg

N_PREDICATES = 6


def run(*args, cwd, check=True):
    """A command run as a user would, in cwd, with nothing pointing at the checkout."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(arg) for arg in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 or not check, (args, done.stdout[-2000:], done.stderr[-2000:])
    return done


def build_wheel(out):
    """The wheel of a copy of the distribution's files (building writes build/ and *.egg-info)."""
    source = out / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source)
    for path in ROOT.glob("sgeval*"):
        if path.suffix == ".py":
            shutil.copy(path, source)
        elif (path / "__init__.py").exists():
            shutil.copytree(path, source / path.name, ignore=shutil.ignore_patterns("__pycache__", "*.nb[ic]"))
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
        "--disable-pip-version-check", "-q", "-w", out / "dist", source, cwd=out)
    wheels = list((out / "dist").glob("sgeval-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def make_venv(out):
    """A fresh venv whose site-packages sees this interpreter's packages except sgeval's own."""
    venv = out / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=out)
    python = venv / "bin" / "python"
    deps = out / "deps"
    deps.mkdir()
    for folder in dict.fromkeys(site.getsitepackages() + [sysconfig.get_path("purelib")]):
        for entry in Path(folder).iterdir() if os.path.isdir(folder) else ():
            if not entry.name.lower().startswith(("sgeval", "__editable__")) and not (deps / entry.name).exists():
                (deps / entry.name).symlink_to(entry)
    purelib = run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=out).stdout.strip()
    Path(purelib, "dependencies.pth").write_text(f"{deps}\n")
    return venv


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel, venv's bin folder, a working folder outside the repository)."""
    out = tmp_path_factory.mktemp("install")
    wheel, venv = build_wheel(out), make_venv(out)
    run(venv / "bin" / "python", "-m", "pip", "install", "--no-index", "--disable-pip-version-check", "-q",
        f"{wheel}[serve,vg150]", cwd=out)
    work = out / "work"
    work.mkdir()
    return wheel, venv / "bin", work


def test_the_wheel_holds_the_modules_and_no_checkout_folder(installed):
    wheel, _, _ = installed
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"sgeval.py", "sgeval_report.py", "sgeval_plots.py", "sgeval_convert", "sgeval_serve"}
    assert {f"sgeval_convert/{cli.module_of(family)[0]}.py" for family in cli.FAMILIES} <= set(names)
    assert "sgeval_convert/README.md" in names and "sgeval_serve/templates/base.html" in names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)  # the MIT licence travels along
    entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    with zipfile.ZipFile(wheel) as archive:
        assert "sgeval = sgeval:cli" in archive.read(entry_points).decode()


def test_installed_commands_help(installed):
    _, bin_dir, work = installed
    assert run(bin_dir / "sgeval", "--help", cwd=work).stdout.startswith("Usage: sgeval [OPTIONS]")
    listing = run(bin_dir / "sgeval", "convert", "--help", cwd=work).stdout
    assert listing.startswith("Usage: sgeval convert [OPTIONS] FAMILY [ARGS]...")
    families = listing.split("\nFamilies")[1].splitlines()[1:]
    assert [line.split()[0] for line in families] == list(cli.FAMILIES)
    assert run(bin_dir / "sgeval", "convert", "sgb", "--help", cwd=work).stdout.startswith(
        "Usage: sgeval convert sgb [OPTIONS] RAW OUT")
    assert run(bin_dir / "sgeval", "serve", "--help", cwd=work).stdout.startswith(
        "Usage: sgeval serve [OPTIONS] [COMMAND] [ARGS]...")
    # the installed modules, not the checkout's; and no top-level package 'convert'
    where = run(bin_dir / "python", "-c", "import sgeval, sgeval_convert.openpsg as o, sgeval_serve; "
                "print(sgeval.__file__, o.image_arrays.__module__, sgeval_serve.__file__)", cwd=work).stdout.split()
    assert where[1] == "sgeval_convert.openpsg"
    assert all(Path(path).is_relative_to(bin_dir.parent) for path in (where[0], where[2])), where
    missing = run(bin_dir / "python", "-c", "import convert", cwd=work, check=False)
    assert missing.returncode == 1 and "No module named 'convert'" in missing.stderr


def perfect_raw_outputs(dataset, gt_path, folder):
    """One OpenPSG result per evaluated image (0.npz ...; panoptic layout): the GT's own segments
    and relation rows, each row's probability 1 on its GT predicate."""
    folder.mkdir()
    by_id = {image["image_id"]: image for image in dataset["images"]}
    for index, gt_image in enumerate(sgeval.read_gt(str(gt_path)).images):
        image = by_id[gt_image.image_id]
        relations = np.asarray(image["relations"], np.int64).reshape(-1, 3)
        rel_dists = np.zeros((len(relations), N_PREDICATES + 1), np.float32)
        rel_dists[np.arange(len(relations)), relations[:, 2] + 1] = 1
        np.savez(folder / f"{index}.npz", labels=np.asarray(image["categories"], np.int64) + 1,
                 masks=np.asarray(image["masks"], bool), rel_pair_idxes=relations[:, :2], rel_dists=rel_dists)
    return folder


def test_installed_sgeval_converts_evaluates_and_reports(installed, tmp_path):
    _, bin_dir, work = installed
    dataset = synth.make_dataset(np.random.default_rng(3), 8, 24, 32, 4, 3, N_PREDICATES, test_fraction=0.75,
                                 max_segments=5, max_relations=5)
    gt = synth.write_gt(dataset, tmp_path / "data")
    raw = perfect_raw_outputs(dataset, gt, tmp_path / "raw")
    pred, results = work / "pred.zip", work / "results.json"
    converted = run(bin_dir / "sgeval", "convert", "openpsg", "--gt", gt, "--quiet", raw, pred, cwd=work)
    assert converted.stdout.startswith(f"wrote {pred}: ")
    openpsg.convert(str(raw), str(tmp_path / "checkout.zip"), gt=str(gt))  # the checkout's converter agrees
    assert pred.read_bytes() == (tmp_path / "checkout.zip").read_bytes()

    evaluated = run(bin_dir / "sgeval", "--gt", gt, "--gt-seg", tmp_path / "data" / "panoptic", "--pred", pred,
                    "--protocol", "multimpo", "--output", results, "--quiet", cwd=work)
    assert "| protocol multimpo |" in evaluated.stdout
    metrics = json.loads(results.read_text())["metrics"]
    assert metrics["R@50"] == 1.0  # the GT's own graphs: every GT row found (multimpo counts repeated rows too)
    ours = sgeval.evaluate(sgeval.make_config({"gt": str(gt), "gt_seg": str(tmp_path / "data" / "panoptic"),
                                               "pred": str(pred), "protocol": "multimpo"}))
    assert metrics == json.loads(json.dumps(ours["metrics"]))

    table = run(bin_dir / "sgeval", "report", results, "--format", "md", cwd=work).stdout
    assert "| 100.0 |" in table and table.startswith("**")
