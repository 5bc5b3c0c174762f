"""Environment variables (issue 36): SGEVAL_MAX_IMAGE_PIXELS, SGEVAL_GT_CACHE_MIB and
SGEVAL_GT_MEMORY_MIB are read when they are used, never at import; a value that is not a whole
number within its range (negative, a float, an exponent, words, non-ASCII digits, too large) is
one clean error naming the variable, from the command line too, while commands that do not use
it work."""

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import ROOT, checked, perfect_case

import sgeval

VARIABLES = ["SGEVAL_MAX_IMAGE_PIXELS", "SGEVAL_GT_CACHE_MIB", "SGEVAL_GT_MEMORY_MIB"]
BAD = ["abc", "1e30", "-5", "-0", "1.5", "0x10", "lots", "1_0", "\u0663", "9" * 30, "+3", "2 3"]


@pytest.mark.parametrize("name", VARIABLES)
def test_import_and_help_never_read_them(name):
    env = {**os.environ, name: "1e30", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", "import sgeval, sgeval_report, sgeval_convert.openimages"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and not done.stderr
    assert CliRunner(env={name: "lots"}).invoke(sgeval.main, ["--help"]).exit_code == 0


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize("name", VARIABLES)
def test_a_bad_value_is_one_line_naming_the_variable(tmp_path, monkeypatch, name, value):
    values = perfect_case(tmp_path)
    monkeypatch.setenv(name, value)
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.evaluate(sgeval.make_config(values))
    problems = checked(info.value)
    assert len(problems) == 1 and problems[0].startswith(f"environment variable {name}=") \
        and "expected a whole number" in problems[0]


@pytest.mark.parametrize("name", VARIABLES)
def test_the_command_line_reports_it(tmp_path, name):
    values = perfect_case(tmp_path)
    result = CliRunner(env={name: "-1"}).invoke(sgeval.main, ["--gt", values["gt"], "--gt-seg", values["gt_seg"],
                                                               "--pred", values["pred"]])
    assert result.exit_code == 1
    assert [line for line in result.output.splitlines() if line.startswith("error:")] == [
        f"error: environment variable {name}='-1': expected a whole number from {1 if 'PIXELS' in name else 0} "
        f"to {1 << 40 if 'PIXELS' in name else 1 << 30}"]


def test_they_are_read_when_used(tmp_path, monkeypatch):
    """The pixel limit of a later read_gt follows the variable; the cache bounds of a later
    GTCache and Evaluator too."""
    values = perfect_case(tmp_path)
    monkeypatch.setenv("SGEVAL_MAX_IMAGE_PIXELS", "10")
    with pytest.raises(sgeval.SGEvalError, match="exceeds the limit of 10 pixels"):
        sgeval.read_gt(values["gt"], values["gt_seg"])
    monkeypatch.setenv("SGEVAL_MAX_IMAGE_PIXELS", " 100000 ")
    assert len(sgeval.read_gt(values["gt"], values["gt_seg"]).images) == 3
    monkeypatch.setenv("SGEVAL_GT_CACHE_MIB", "3")
    assert sgeval.GTCache(str(tmp_path / "c")).disk_bytes == 3 << 20
    monkeypatch.setenv("SGEVAL_GT_MEMORY_MIB", "0")  # 0: no memory cache
    del values["pred"]
    evaluator = sgeval.Evaluator(values)
    assert evaluator.gt_cache.memory_bytes == 0
    monkeypatch.setenv("SGEVAL_GT_CACHE_MIB", "")  # empty: the default
    assert sgeval.GTCache(None).disk_bytes == sgeval.GT_CACHE_DISK_MIB << 20


def test_a_box_mode_evaluation_does_not_read_the_cache_variables(tmp_path, monkeypatch):
    values = perfect_case(tmp_path, mode="box")
    for name in VARIABLES[1:]:
        monkeypatch.setenv(name, "lots")
    assert sgeval.evaluate(sgeval.make_config(values))["metrics"]["R@20"] == 1.0


@pytest.mark.parametrize("value", BAD[:4])
def test_the_open_images_converter_reads_the_pixel_limit_when_used(monkeypatch, value):
    from sgeval_convert import openimages
    monkeypatch.setenv("SGEVAL_MAX_IMAGE_PIXELS", value)
    with pytest.raises(sgeval.SGEvalError, match="environment variable SGEVAL_MAX_IMAGE_PIXELS"):
        openimages.convert_entry(0, {"img_fn": "a", "img_size": [4, 4], "bbox": [[0, 0, 1, 1]], "det_labels": [0],
                                     "rel": [[0, 0, 0]]}, 1, 1, "gt.json", _Problems())


class _Problems(list):
    def add(self, line):
        self.append(line)


def test_the_jit_cache_switch_is_read_when_kernels_compile():
    """SGEVAL_NO_JIT_CACHE is read at the first kernel call, in a fresh process (import reads
    nothing)."""
    code = ("import os, numpy as np, sgeval; os.environ['SGEVAL_NO_JIT_CACHE'] = '1'; "
            "sgeval.popcount64(np.uint64(3)); print(type(sgeval.popcount64._cache).__name__)")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "NullCache", done.stderr
