"""sgeval.py is one copyable file: copied alone into another directory (no pyproject.toml, no
sgeval_convert/ or tools/, the repository not on the path), it runs there and gives the results of the
repository's module. Plus: the helpers beside it import sgeval normally and never patch sys.path."""

import json
import os
import re
import shutil
import subprocess
import sys

from conftest import ROOT, sgeval

from tools import make_demo


def test_sgeval_py_copied_alone_runs_and_gives_the_same_results(tmp_path):
    elsewhere = tmp_path / "other_repo"
    elsewhere.mkdir()
    copy = shutil.copy(ROOT / "sgeval.py", elsewhere / "sgeval.py")
    gt, pred = make_demo.make_demo(tmp_path / "data")
    gt_seg, output = tmp_path / "data" / "panoptic", tmp_path / "results.json"
    # Nothing points at the repository: no PYTHONPATH, and the working directory is the copy's. The
    # copy compiles its numba kernels afresh, without a cache (about 10 s on 2 cores; 1.5 s more when
    # it also writes a cache beside itself), while this process evaluates with the repository's module.
    env = {**{key: value for key, value in os.environ.items() if key != "PYTHONPATH"}, "SGEVAL_NO_JIT_CACHE": "1"}
    run = subprocess.Popen([sys.executable, str(copy), "--gt", str(gt), "--gt-seg", str(gt_seg), "--pred", str(pred),
                            "--compare-protocols", "--output", str(output), "--quiet"],
                           cwd=elsewhere, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        imported = subprocess.run([sys.executable, "-c", "import sgeval; print(sgeval.__file__)"], cwd=elsewhere,
                                  env=env, capture_output=True, text=True, timeout=120)
        assert imported.returncode == 0, imported.stderr
        assert os.path.samefile(imported.stdout.strip(), copy)  # the copy, not the repository's sgeval.py
        assert os.path.samefile(sgeval.__file__, ROOT / "sgeval.py")
        ours = json.loads(json.dumps(sgeval.evaluate(sgeval.make_config(
            {"gt": str(gt), "gt_seg": str(gt_seg), "pred": str(pred), "protocols": list(sgeval.RECALL_PROTOCOLS)}))))
        stdout, stderr = run.communicate(timeout=300)
    finally:
        run.kill()
        run.wait()
    assert run.returncode == 0, stderr
    assert "| protocol unique |" in stdout and "results written to" in stderr

    copied = json.loads(output.read_text())
    assert set(copied["by_protocol"]) == set(sgeval.RECALL_PROTOCOLS) and copied["images"]["evaluated"] > 0
    assert copied["metrics"] == ours["metrics"]
    assert copied["by_protocol"] == ours["by_protocol"]
    assert {key: value for key, value in copied.items() if key != "config"} == \
        {key: value for key, value in ours.items() if key != "config"}
    assert {**copied["config"], "output": None} == ours["config"]


def test_helpers_import_sgeval_normally():
    """sgeval_convert/ is a package installed with sgeval, convert/ and tools/ are run as modules from
    the repository root (python -m convert.hilo, python -m tools.make_demo) and the tests get the
    root from pyproject.toml's pytest pythonpath."""
    paths = [*sorted((ROOT / "sgeval_convert").glob("*.py")), *sorted((ROOT / "convert").glob("*.py")),
             *sorted((ROOT / "tools").glob("*.py")),
             ROOT / "tests" / "conftest.py"]
    assert len(paths) > 8
    assert [path for path in paths if re.search(r"\bsys\.path\b", path.read_text())] == []
