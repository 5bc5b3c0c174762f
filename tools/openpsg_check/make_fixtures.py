"""Regenerate sgeval's OpenPSG fixtures, tests/data/openpsg/<kind>-<seed>.zip, with OpenPSG's own numbers.

    tools/openpsg_check/build/venv/bin/python -m tools.openpsg_check.make_fixtures [--out DIR]
    (from the repository root; default --out: tests/data/openpsg)

For each fixture, make_raw.generate writes the GT and raw results (build/data/<name>/; every
special case of make_raw.CASES present), oracle.score gives OpenPSG's numbers in pan_seg and bbox
mode, and two altered OpenPSG evaluators must change them (MUTANTS: the data decide the float32
box IoU and the >= 0.5 mask IoU rules). The zip holds psg.json, panoptic/, raw/, raw_summary.json
and openpsg_<method>.json trimmed to what tests/oracles/test_openpsg_oracle.py compares; its bytes depend
only on the contents (tools/oracle_common.write_zip).
"""

import shutil
import sys
import types
from pathlib import Path

import torch

from tools.openpsg_check import make_raw, openpsg_env, oracle
from tools.oracle_common import fixtures_main, patched, write_json, write_zip

HERE = Path(__file__).resolve().parent
FIXTURES = {"one-stage-0": ("one-stage", 0, 16), "two-stage-0": ("two-stage", 0, 24)}  # name: kind, seed, images
METHODS = ("pan_seg", "bbox")
KEYS = [f"{m}@{k}" for m in ("R", "mR", "ngR", "mNgR") for k in oracle.KS] + ["images_recorded", "per_image_R"]


def float64_box_iou(metrics):
    """OpenPSG with its box IoU in float64 instead of mmdet's float32."""
    return patched(metrics, "torch", types.SimpleNamespace(Tensor=lambda a: torch.tensor(a, dtype=torch.float64)))


def strict_mask_threshold(metrics):
    """OpenPSG with a mask IoU of exactly 0.5 scored as a miss."""
    saved = metrics.mask_iou

    def mask_iou(mask1, mask2):
        iou = saved(mask1, mask2)
        return iou - 1e-12 if iou == 0.5 else iou

    return patched(metrics, "mask_iou", mask_iou)


MUTANTS = {"bbox": float64_box_iou, "pan_seg": strict_mask_threshold}  # the method whose numbers each must change


def trimmed(numbers):
    return {key: numbers[key] for key in KEYS if key in numbers}


def evaluate(data):
    """{method: trimmed numbers}; exits when a mutant leaves the R and mR values unchanged."""
    metrics, out = openpsg_env.load().sgg_metrics, {}
    for method in METHODS:
        args = data / "psg.json", data / "panoptic", method, data / "raw"
        out[method] = trimmed(oracle.score(*args))
        with MUTANTS[method](metrics):
            mutant = trimmed(oracle.score(*args))
        changed = [key for key in KEYS[:6] if mutant[key] != out[method][key]]  # KEYS[:6]: R@k, mR@k
        if not changed:
            sys.exit(f"{data}: {MUTANTS[method].__name__} does not change OpenPSG's {method} R or mR")
        print(f"{data.name} {method}: {MUTANTS[method].__name__} changes " +
              ", ".join(f"{key} {out[method][key]:.4f} -> {mutant[key]:.4f}" for key in changed))
    return out


def write_fixture(name, kind, seed, images, out):
    data = HERE / "build" / "data" / name
    shutil.rmtree(data, ignore_errors=True)
    make_raw.generate(seed, kind, data, images)
    for method, numbers in evaluate(data).items():
        write_json(data / f"openpsg_{method}.json", numbers)
    files = sorted(p for p in data.rglob("*") if p.is_file())
    write_zip(out / f"{name}.zip", {p.relative_to(data).as_posix(): p.read_bytes() for p in files})
    print(f"{out / name}.zip: {len(files)} files, {(out / f'{name}.zip').stat().st_size} bytes")


def main():
    oracle.quiet()
    fixtures_main(__doc__.split("\n\n")[0], oracle.ROOT / "tests" / "data" / "openpsg", FIXTURES, write_fixture)


if __name__ == "__main__":
    main()
